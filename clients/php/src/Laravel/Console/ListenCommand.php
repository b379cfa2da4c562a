<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel\Console;

use Chargeonce\Client;
use Chargeonce\Event;
use Chargeonce\Laravel\Events\EventReceived;
use Chargeonce\Laravel\Events\QueueNotice;
use Illuminate\Console\Command;
use Illuminate\Contracts\Cache\Factory as CacheFactory;
use Illuminate\Contracts\Events\Dispatcher;

/**
 * Follows the server's event stream and dispatches each event as a Laravel
 * event: EventReceived for all, QueueNotice for queue_notice (the delayed
 * "you are in the queue" message of a listener of yours). After each
 * durable event its listeners handled, its id is stored in the cache, and
 * the next run resumes after it (Last-Event-ID): a restart loses none and
 * repeats at most the one being handled. Run it as one long-lived process
 * (supervisor, systemd) with the gateway token.
 */
final class ListenCommand extends Command
{
    /** @var string */
    protected $signature = 'chargeonce:listen
        {--seconds= : stop after this many seconds (default: run until stopped)}
        {--after= : resume after this event id instead of the stored one}';

    /** @var string */
    protected $description = 'Dispatch chargeonce\'s events (queue notices, releases, …) as Laravel events';

    public function handle(Client $client, Dispatcher $events, CacheFactory $caches): int
    {
        $config = $this->laravel['config']['chargeonce.events'] ?? [];
        $cache = $caches->store($config['cache_store'] ?? null);
        $key = (string) ($config['cursor_key'] ?? 'chargeonce:last_event_id');
        $after = $this->option('after') ?? $cache->get($key);
        $seconds = $this->option('seconds');
        $this->info(sprintf('chargeonce: listening after event %s', $after ?? '(none: from now)'));

        $last = $client->listen(
            static function (Event $event) use ($events, $cache, $key): bool {
                $events->dispatch(new EventReceived($event));
                if ($event->event === 'queue_notice' && $event->chat !== null && $event->reservation !== null) {
                    $events->dispatch(new QueueNotice($event->chat, $event->reservation));
                }
                if ($event->event_id !== null) {
                    $cache->forever($key, $event->event_id);
                }
                return true;
            },
            $after === null ? null : (int) $after,
            $seconds === null ? null : (float) $seconds,
        );
        $this->info(sprintf('chargeonce: stopped after event %s', $last ?? '(none)'));
        return 0;
    }
}
