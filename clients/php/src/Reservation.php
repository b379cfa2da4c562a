<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * A job's hold on a chat's pockets (reserve, cancel, start, heartbeat, fail,
 * uncertain). The fields are the JSON's (docs/clients.md).
 */
final readonly class Reservation
{
    public function __construct(
        /** The reservation id: name it to start, commit or fail the job. */
        public int $id,
        public int $chat,
        /** The kind of job, e.g. "text" or "image". */
        public string $kind,
        /** queued or in_progress while active; committed, failed, cancelled, released; outcome_unknown. */
        public string $status,
        /** The queue the chat's plan chose (e.g. a priority queue for premium chats): dispatch the job there. */
        public string $queue,
        /** What the hold takes, per pocket. */
        public Pockets $held,
        /** The idempotency key: the caller's, or the client's own `auto:…` one. */
        public string $request_id,
        public \DateTimeImmutable $created_at,
        /** When the lease ends unless a heartbeat renews it; null before the first heartbeat. */
        public ?\DateTimeImmutable $lease_expires_at,
        /** Which of the chat's slots it occupies; -1: none (outcome_unknown). */
        public int $slot,
        public ?\DateTimeImmutable $ended_at,
        /** What the job may cost at most, in units of its kind. */
        public int $units,
        /** The user cancelled the started job (`request` policy): stop, then fail or commit what was done. */
        public bool $cancel_requested,
        /** The chat's window the hold was taken in: that window's daily pockets pay for it. */
        public int $window,
        /** outcome_unknown only: the key the worker gave its provider. */
        public ?string $provider_ref,
        /** outcome_unknown only: since when. */
        public ?\DateTimeImmutable $uncertain_at,
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        return new self(
            Json::int($x, 'id'),
            Json::int($x, 'chat'),
            Json::string($x, 'kind'),
            Json::string($x, 'status'),
            Json::string($x, 'queue'),
            Pockets::fromArray(Json::array($x, 'held')),
            Json::string($x, 'request_id'),
            Json::time($x, 'created_at'),
            Json::timeOrNull($x, 'lease_expires_at'),
            Json::int($x, 'slot'),
            Json::timeOrNull($x, 'ended_at'),
            Json::int($x, 'units'),
            Json::bool($x, 'cancel_requested'),
            Json::int($x, 'window'),
            Json::stringOrNull($x, 'provider_ref'),
            Json::timeOrNull($x, 'uncertain_at'),
        );
    }

    /** True while the job holds a slot or its outcome is unknown. */
    public function isActive(): bool
    {
        return in_array($this->status, ['queued', 'in_progress', 'outcome_unknown'], true);
    }
}
