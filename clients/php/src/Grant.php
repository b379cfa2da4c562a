<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * One credit grant of a chat's balance, as a void answers it (a second void
 * answers the same grant, nothing changed) and status lists it.
 */
final readonly class Grant
{
    public function __construct(
        /** A top-up's grant_id. */
        public int $id,
        public int $chat,
        /** purchase, promo or admin. */
        public string $source,
        /** What it granted. */
        public int $credits,
        /** credits - charged - expired - voided; held credits are still in it. */
        public int $left,
        /** What open holds hold of it. */
        public int $held,
        /** Lower spends first. */
        public int $priority,
        /** Null: never. */
        public ?\DateTimeImmutable $expires_at,
        /** The top-up's that made it; null: not a top-up's (an opening balance). */
        public ?string $payment_id,
        public \DateTimeImmutable $created_at,
        /** When its unheld credits expired; null: they did not. */
        public ?\DateTimeImmutable $expired_at,
        /** Null: not voided. */
        public ?\DateTimeImmutable $voided_at,
        /** It pays nothing new: it expired (written or not) before any void. */
        public bool $expired = false,
        /** It pays nothing new: it was voided before it expired. */
        public bool $voided = false,
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        return new self(
            Json::int($x, 'id'),
            Json::int($x, 'chat'),
            Json::string($x, 'source'),
            Json::int($x, 'credits'),
            Json::int($x, 'left'),
            Json::int($x, 'held'),
            Json::int($x, 'priority'),
            Json::timeOrNull($x, 'expires_at'),
            Json::stringOrNull($x, 'payment_id'),
            Json::time($x, 'created_at'),
            Json::timeOrNull($x, 'expired_at'),
            Json::timeOrNull($x, 'voided_at'),
            Json::boolOrNull($x, 'expired') ?? false,
            Json::boolOrNull($x, 'voided') ?? false,
        );
    }
}
