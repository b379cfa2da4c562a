<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

use Chargeonce\Exception\ConnectionException;
use Chargeonce\Exception\UnexpectedResponseException;
use Chargeonce\Http\EventSource;

/**
 * One open event stream (Client::events()). Read it with next($seconds),
 * which waits at most that long, or with foreach, which waits as long as the
 * stream lasts. Durable events are delivered once per stream: a replay
 * after Last-Event-ID, or the server's at-least-once delivery, may repeat
 * an id, and those at or below the last one delivered are dropped. When the
 * stream ends (the server stopped, `overflow`, `subscription_ended`, the
 * connection broke or fell silent) next() throws a ConnectionException:
 * open another with the last id handled (Client::listen() does all that).
 *
 * @implements \IteratorAggregate<int, Event>
 */
final class EventStream implements \IteratorAggregate
{
    private SseParser $parser;
    /** @var list<Event> parsed, not yet delivered */
    private array $ready = [];
    private bool $subscribed = false;
    /** The highest durable id delivered or queued: the line for dropping repeats. */
    private ?int $highestQueued;
    private ?int $lastDelivered;

    /** @param ?int $afterId the id the stream was opened after (Last-Event-ID), if any */
    public function __construct(private readonly EventSource $source, ?int $afterId = null)
    {
        $this->parser = new SseParser();
        $this->highestQueued = $afterId;
        $this->lastDelivered = $afterId;
    }

    public function __destruct()
    {
        $this->close();
    }

    /**
     * Waits up to `$seconds` for the server's `: subscribed`: from then on no
     * event is missed, so a gateway subscribes before it reserves.
     *
     * @throws ConnectionException when it does not come in time or the stream ends first
     */
    public function waitSubscribed(float $seconds): void
    {
        $until = microtime(true) + $seconds;
        while (!$this->subscribed) {
            $left = $until - microtime(true);
            if ($left <= 0 || $this->source->ended()) {
                throw new ConnectionException(sprintf('the event stream was not subscribed within %.1f s', $seconds));
            }
            $this->pump($left);
        }
    }

    /**
     * The next event, waiting up to `$seconds`; null when none came in time.
     *
     * @throws ConnectionException when the stream has ended (after its last event was delivered)
     */
    public function next(float $seconds): ?Event
    {
        $until = microtime(true) + $seconds;
        while ($this->ready === []) {
            if ($this->source->ended()) {
                throw new ConnectionException(sprintf(
                    'the event stream ended; open another after event %s',
                    $this->lastDelivered === null ? '(none yet)' : (string) $this->lastDelivered,
                ));
            }
            $left = $until - microtime(true);
            if ($left <= 0) {
                return null;
            }
            $this->pump($left);
        }
        $event = array_shift($this->ready);
        if ($event->event_id !== null) {
            $this->lastDelivered = $event->event_id;
        }
        return $event;
    }

    /**
     * The events as they come, for as long as the stream lasts (a
     * ConnectionException ends the loop when it ends).
     *
     * @return \Generator<int, Event>
     */
    public function getIterator(): \Generator
    {
        for (;;) {
            // One second at a time: the server's keep-alive comes every second.
            $event = $this->next(1.0);
            if ($event !== null) {
                yield $event;
            }
        }
    }

    /** The id of the last durable event next() delivered (or the one opened after): store it to resume. */
    public function lastEventId(): ?int
    {
        return $this->lastDelivered;
    }

    public function close(): void
    {
        $this->source->close();
    }

    /** Reads what arrives within `$seconds` and queues its events. */
    private function pump(float $seconds): void
    {
        foreach ($this->parser->feed($this->source->read($seconds)) as $message) {
            if (isset($message['comment'])) {
                $this->subscribed = $this->subscribed || $message['comment'] === 'subscribed';
                continue;
            }
            $this->queue($message['event'] ?? '', $message['data'] ?? '', $message['id'] ?? null);
        }
    }

    private function queue(string $name, string $data, ?string $id): void
    {
        if ($data === '') {
            return; // the standard dispatches no event without data
        }
        $json = json_decode($data, true);
        if (!is_array($json)) {
            throw new UnexpectedResponseException('an event whose data is not a JSON object: ' . $data, 200);
        }
        $event = Event::fromFrame($name, $json, $id);
        if ($event->event_id !== null) {
            if ($this->highestQueued !== null && $event->event_id <= $this->highestQueued) {
                return; // a repeat: delivered already, or at or before the id resumed after
            }
            $this->highestQueued = $event->event_id;
        }
        $this->ready[] = $event;
    }
}
