<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace App\Console\Commands;

use Chargeonce\Laravel\Facades\Chargeonce;
use Illuminate\Console\Command;

/**
 * What the server says a chat was charged, from its history (admin): one
 * JSON object with the daily messages and images left, the commits per reservation, and
 * how each reservation that did not commit ended.
 */
final class Charges extends Command
{
    /** @var string */
    protected $signature = 'demo:charges {chat}';

    /** @var string */
    protected $description = 'Print the commits and reservation states of a chat as JSON';

    public function handle(): int
    {
        $chat = (int) $this->argument('chat');
        $commits = [];
        $ended = [];
        $page = Chargeonce::history($chat, limit: 1000);
        foreach ($page->entries as $entry) {
            if ($entry->cause === 'commit' && $entry->reservation !== null) {
                $commits[$entry->reservation][] = $entry->units;
            } elseif ($entry->cause === 'reservation' && $entry->reservation !== null) {
                $ended[$entry->reservation] = $entry->status;
            }
        }
        $status = Chargeonce::status($chat);
        $this->line(json_encode([
            'daily_messages' => $status->daily_messages,
            'daily_images' => $status->daily_images,
            'active' => array_map(static fn ($r) => $r->id, $status->reservations),
            'commits' => (object) $commits,
            'ended' => (object) $ended,
        ], JSON_THROW_ON_ERROR));
        return 0;
    }
}
