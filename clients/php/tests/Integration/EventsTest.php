<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Integration;

use Chargeonce\Client;
use Chargeonce\Event;
use Chargeonce\EventStream;
use Chargeonce\Exception\ChargeonceInvalidArgumentException;

/** The event stream of a real server: the queue notice, durable ids, resuming after one. */
final class EventsTest extends IntegrationTestCase
{
    /** The next event of `$chat` on `$stream` that `$wanted` accepts; fails after WAIT_SECONDS. */
    private function nextOf(EventStream $stream, int $chat, string $what, callable $wanted): Event
    {
        return $this->waitFor($what, static function () use ($stream, $chat, $wanted): ?Event {
            $event = $stream->next(0.5);
            return $event !== null && $event->chat === $chat && $wanted($event) ? $event : null;
        });
    }

    /** A job of `$chat` made uncertain: the server publishes reconcile_needed for it. */
    private static function uncertainJob(Client $client, int $chat, string $ref): int
    {
        $job = $client->reserve($chat, 'image', $ref);
        $client->start($chat, $job->id);
        $client->uncertain($chat, $job->id, $ref);
        return $job->id;
    }

    public function testTheQueueNoticeOfAReservationArrives(): void
    {
        $client = $this->client();
        $chat = self::newChat();
        $client->createChat($chat, balance: 1);
        $stream = $client->events(); // subscribed: nothing from here on is missed

        $job = $client->reserve($chat, 'image', 'notice-1');
        $notice = $this->nextOf($stream, $chat, 'queue_notice (queue-notice-delay 1 s)',
            static fn (Event $e): bool => $e->event === 'queue_notice');
        $stream->close();

        self::assertSame([$job->id, null], [$notice->reservation, $notice->event_id]);
    }

    public function testAStreamResumesAfterTheLastIdHandled(): void
    {
        $client = $this->client();
        $chat = self::newChat();
        $client->createChat($chat, balance: 2);
        $stream = $client->events();
        $first = self::uncertainJob($client, $chat, "ref-a-$chat");
        $second = self::uncertainJob($client, $chat, "ref-b-$chat");
        $reconcile = static fn (Event $e): bool => $e->event === 'reconcile_needed';
        $a = $this->nextOf($stream, $chat, 'reconcile_needed of the first job', $reconcile);
        $b = $this->nextOf($stream, $chat, 'reconcile_needed of the second job', $reconcile);
        $stream->close();
        self::assertSame([$first, "ref-a-$chat"], [$a->reservation, $a->provider_ref]);
        self::assertSame($second, $b->reservation);
        self::assertGreaterThan($a->event_id, $b->event_id);

        // A new stream after the first id replays what came after it, not the first.
        $resumed = $client->events($a->event_id);
        $replayed = $this->nextOf($resumed, $chat, 'the replay after the first id', $reconcile);
        $resumed->close();
        self::assertSame([$b->event_id, $second], [$replayed->event_id, $replayed->reservation]);

        // listen() does the same and hands back the id to store.
        $seen = [];
        $last = $client->listen(static function (Event $e) use ($chat, $b, &$seen): bool {
            if ($e->chat === $chat) {
                $seen[] = $e->event_id;
            }
            return $e->event_id !== $b->event_id;
        }, $a->event_id, self::WAIT_SECONDS);
        self::assertSame([$b->event_id], $seen);
        self::assertSame($b->event_id, $last);
    }

    public function testAnIdBeyondTheNewestEventIsRefused(): void
    {
        $this->expectException(ChargeonceInvalidArgumentException::class);
        $this->client()->events(999_999_999_999_999);
    }
}
