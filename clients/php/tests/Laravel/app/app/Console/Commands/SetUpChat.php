<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace App\Console\Commands;

use Chargeonce\Laravel\Facades\Chargeonce;
use Illuminate\Console\Command;

/** An administrator registers a chat (and makes it premium). */
final class SetUpChat extends Command
{
    /** @var string */
    protected $signature = 'demo:chat {chat} {--images=10} {--messages=10} {--premium} {--max-active-jobs=1}';

    /** @var string */
    protected $description = 'Register a chat with daily messages and images';

    public function handle(): int
    {
        $chat = (int) $this->argument('chat');
        Chargeonce::createChat($chat, dailyMessages: (int) $this->option('messages'),
            dailyImages: (int) $this->option('images'),
            maxActiveJobs: (int) $this->option('max-active-jobs'));
        if ($this->option('premium')) {
            Chargeonce::setPremium($chat, new \DateTimeImmutable('+1 day'));
        }
        $this->line("chat=$chat");
        return 0;
    }
}
