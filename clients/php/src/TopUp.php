<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * A purchase credited once per payment id, and the grant it made; a retried
 * top-up answers the first. An answer of a server before grants (no
 * grant_id, source, priority, expires_at, expires_in_ms) reads as a
 * purchase of priority 100 that never expires.
 */
final readonly class TopUp
{
    public function __construct(
        public int $chat,
        public string $payment_id,
        public int $credits,
        public \DateTimeImmutable $purchased_at,
        /** Null: a top-up made before grants, retried (or a server before them). */
        public ?int $grant_id = null,
        /** purchase, promo or admin. */
        public string $source = 'purchase',
        /** Lower spends first. */
        public int $priority = 100,
        /** Null: never. */
        public ?\DateTimeImmutable $expires_at = null,
        /** As the top-up gave it; null: not relative. */
        public ?int $expires_in_ms = null,
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        return new self(
            Json::int($x, 'chat'),
            Json::string($x, 'payment_id'),
            Json::int($x, 'credits'),
            Json::time($x, 'purchased_at'),
            Json::intOrNull($x, 'grant_id'),
            array_key_exists('source', $x) ? Json::string($x, 'source') : 'purchase',
            array_key_exists('priority', $x) ? Json::int($x, 'priority') : 100,
            Json::timeOrNull($x, 'expires_at'),
            Json::intOrNull($x, 'expires_in_ms'),
        );
    }
}
