<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * One event of the stream (GET /v1/events), the fields of its JSON
 * (`chargeonce-cli watch` prints the same objects). The durable ones
 * (reservation_released, cancel_requested, reconcile_needed,
 * limits_refilled, credits_expired, credits_expiring, balance_low) carry
 * an $event_id: store the last one handled and resume after it.
 * queue_notice has none (a timer, sent at most once); overflow and
 * subscription_ended end the stream. An event this version does not know
 * comes as it is (its name and $data): skip it, do not stop.
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
        /** credits_expired, credits_expiring: the grant. */
        public ?int $grant = null,
        /**
         * credits_expired: the credits that left the balance (those jobs still
         * hold expire when the jobs end, unless charged); credits_expiring:
         * what the grant has left.
         */
        public ?int $credits = null,
        /** credits_expiring: when the grant expires. */
        public ?\DateTimeImmutable $expires_at = null,
        /** balance_low: the available balance after the fall. */
        public ?int $available = null,
        /** balance_low: the threshold it fell below. */
        public ?int $threshold = null,
        /** balance_low: reserve (then $reservation is the job), expire or void. */
        public ?string $cause = null,
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
            Json::intOrNull($data, 'grant'),
            Json::intOrNull($data, 'credits'),
            Json::timeOrNull($data, 'expires_at'),
            Json::intOrNull($data, 'available'),
            Json::intOrNull($data, 'threshold'),
            Json::stringOrNull($data, 'cause'),
        );
    }

    /** True for the events that end their stream: reconnect after the last id handled. */
    public function endsStream(): bool
    {
        return $this->event === 'overflow' || $this->event === 'subscription_ended';
    }
}
