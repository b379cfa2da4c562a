<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * One event of the stream (GET /v1/events), the fields of its JSON
 * (`chargeonce-cli watch` prints the same objects). The durable ones
 * (reservation_released, cancel_requested, reconcile_needed,
 * limits_refilled) carry an $event_id: store the last one handled and
 * resume after it. queue_notice has none (a timer, sent at most once);
 * overflow and subscription_ended end the stream.
 */
final readonly class Event
{
    /** @param array<mixed> $data the whole JSON object */
    public function __construct(
        /**
         * queue_notice, reservation_released, cancel_requested,
         * reconcile_needed, limits_refilled, overflow or subscription_ended.
         */
        public string $event,
        public ?int $chat,
        public ?int $reservation,
        /** Durable events: increasing in commit order, the same on every server. */
        public ?int $event_id,
        /** reservation_released: lease_expired, sweep_timeout, unresolved, … */
        public ?string $reason,
        /** reconcile_needed: the key the worker gave its provider. */
        public ?string $provider_ref,
        /** subscription_ended: the last event the server sent; resume after it. */
        public ?int $last_event_id,
        public array $data,
    ) {
    }

    /**
     * @param string $event the `event:` line ("" if none: then the JSON's own "event")
     * @param array<mixed> $data the decoded `data:` JSON
     * @param ?string $id the `id:` line, if any
     */
    public static function fromFrame(string $event, array $data, ?string $id): self
    {
        $eventId = Json::intOrNull($data, 'event_id');
        if ($eventId === null && $id !== null && ctype_digit($id)) {
            $eventId = (int) $id;
        }
        return new self(
            $event !== '' ? $event : Json::string($data, 'event'),
            Json::intOrNull($data, 'chat'),
            Json::intOrNull($data, 'reservation'),
            $eventId,
            Json::stringOrNull($data, 'reason'),
            Json::stringOrNull($data, 'provider_ref'),
            Json::intOrNull($data, 'last_event_id'),
            $data,
        );
    }

    /** True for the events that end their stream: reconnect after the last id handled. */
    public function endsStream(): bool
    {
        return $this->event === 'overflow' || $this->event === 'subscription_ended';
    }
}
