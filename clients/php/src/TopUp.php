<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/** A purchase credited once per payment id; a retried top-up answers the first. */
final readonly class TopUp
{
    public function __construct(
        public int $chat,
        public string $payment_id,
        public int $credits,
        public \DateTimeImmutable $purchased_at,
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
        );
    }
}
