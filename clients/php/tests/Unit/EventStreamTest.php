<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Unit;

use Chargeonce\Client;
use Chargeonce\Event;
use Chargeonce\EventStream;
use Chargeonce\Exception\ConnectionException;
use Chargeonce\Exception\ForbiddenException;
use Chargeonce\Exception\TooManyStreamsException;
use Chargeonce\RetryPolicy;
use Chargeonce\Tests\Support\FakeEventSource;
use Chargeonce\Tests\Support\FakeTransport;
use PHPUnit\Framework\TestCase;

/** Reading events: subscription, repeats dropped by id, the end of a stream, resuming after the last id. */
final class EventStreamTest extends TestCase
{
    /** @var list<float> */
    private array $slept = [];

    private static function durable(int $id, string $type = 'cancel_requested', int $reservation = 17): string
    {
        $data = json_encode(['event' => $type, 'chat' => 42, 'reservation' => $reservation, 'event_id' => $id]);
        return "id: $id\nevent: $type\ndata: $data\n\n";
    }

    private static function notice(int $reservation): string
    {
        $data = json_encode(['event' => 'queue_notice', 'chat' => 42, 'reservation' => $reservation]);
        return "event: queue_notice\ndata: $data\n\n";
    }

    private function client(FakeTransport $transport, int $maxAttempts = 5): Client
    {
        $policy = new RetryPolicy(maxAttempts: $maxAttempts, sleeper: function (float $s): void {
            $this->slept[] = $s;
        }, random: static fn (): float => 0.0);
        return new Client('http://fake', 'gw-token', retry: $policy, transport: $transport);
    }

    /** @return list<?int> */
    private static function drain(EventStream $stream): array
    {
        $ids = [];
        try {
            for (;;) {
                $event = $stream->next(0.01);
                if ($event !== null) {
                    $ids[] = $event->event_id ?? -$event->reservation;
                }
            }
        } catch (ConnectionException) {
            return $ids; // the end
        }
    }

    public function testEventsComeTypedOnceEachInOrder(): void
    {
        $stream = new EventStream(new FakeEventSource([
            ": subscribed\n\n" . self::notice(5),
            self::durable(7) . self::durable(8, 'reservation_released'),
            self::durable(8, 'reservation_released') . self::durable(6) . ": keep-alive\n\n" . self::durable(9),
        ]));

        $stream->waitSubscribed(1.0);
        $first = $stream->next(1.0);

        self::assertInstanceOf(Event::class, $first);
        self::assertSame(
            ['queue_notice', 42, 5, null],
            [$first->event, $first->chat, $first->reservation, $first->event_id],
        );
        self::assertSame([7, 8, 9], self::drain($stream), 'repeats and older ids are dropped');
        self::assertSame(9, $stream->lastEventId());
    }

    public function testAStreamOpenedAfterAnIdDropsThatIdAndOlderOnes(): void
    {
        $chunk = ": subscribed\n\n" . self::durable(4) . self::durable(5) . self::durable(6);
        $stream = new EventStream(new FakeEventSource([$chunk]), 5);

        self::assertSame([6], self::drain($stream));
    }

    public function testNextWaitsAtMostItsTimeAndTheEndIsAConnectionException(): void
    {
        $source = new FakeEventSource([": subscribed\n\n", '', self::durable(3)]);
        $stream = new EventStream($source);

        self::assertNull($stream->next(0.01));
        self::assertSame(3, $stream->next(0.01)?->event_id);
        $this->expectException(ConnectionException::class);
        $this->expectExceptionMessage('open another after event 3');
        $stream->next(0.01);
    }

    public function testEventsOpensAfterTheIdAndWaitsForTheSubscription(): void
    {
        $transport = new FakeTransport([], [new FakeEventSource([": subscribed\n\n"])]);

        $this->client($transport)->events(12);

        self::assertSame(['Last-Event-ID' => '12'], $transport->streamRequests[0]->headers);
        self::assertSame('gw-token', $transport->streamRequests[0]->token);
        self::assertSame('/v1/events', $transport->streamRequests[0]->path);
    }

    public function testListenResumesAfterTheLastIdHandledAndStopsWhenTold(): void
    {
        $transport = new FakeTransport([], [
            new FakeEventSource(
                [": subscribed\n\n" . self::durable(5) . self::notice(30) . self::durable(6)],
                breakAtEnd: true,
            ),
            new FakeEventSource([": subscribed\n\n" . self::durable(6) . self::durable(7) . self::durable(8)]),
        ]);
        $seen = [];

        $last = $this->client($transport)->listen(static function (Event $e) use (&$seen): bool {
            $seen[] = $e->event_id ?? -$e->reservation;
            return $e->event_id !== 7;
        }, 4, 60.0);

        self::assertSame([5, -30, 6, 7], $seen, 'the replayed 6 is not handled twice');
        self::assertSame(7, $last);
        self::assertSame(['Last-Event-ID' => '4'], $transport->streamRequests[0]->headers);
        self::assertSame(['Last-Event-ID' => '6'], $transport->streamRequests[1]->headers);
        self::assertCount(1, $this->slept);
    }

    public function testListenGivesUpAfterTheRetryPolicysTriesWithNoEvent(): void
    {
        $transport = new FakeTransport([], [
            new TooManyStreamsException('too_many_streams', 'at most 4', 503, 1),
            new ConnectionException('refused (test)', 7),
            new ConnectionException('refused (test)', 7),
        ]);

        $this->expectException(ConnectionException::class);
        try {
            $this->client($transport, maxAttempts: 3)->listen(static fn (Event $e): bool => true, null, 60.0);
        } finally {
            self::assertCount(3, $transport->streamRequests);
            self::assertSame([1.0, 0.2], $this->slept);
        }
    }

    public function testListenDoesNotRetryARefusal(): void
    {
        $transport = new FakeTransport([], [new ForbiddenException('forbidden', 'not a gateway token', 403)]);

        $this->expectException(ForbiddenException::class);
        $this->client($transport)->listen(static fn (Event $e): bool => true, null, 60.0);
    }
}
