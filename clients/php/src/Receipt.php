<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/** What a commit charged; a retried commit answers the first receipt. */
final readonly class Receipt
{
    public function __construct(
        public int $reservation,
        public int $chat,
        public string $kind,
        /** What was charged, per pocket. */
        public Pockets $charged,
        public \DateTimeImmutable $committed_at,
        /** The units charged: the hold's, or fewer. */
        public int $units,
        /** What a commit of fewer units than held gave back, per pocket. */
        public Pockets $released,
        /** The window whose daily pockets paid: the hold's, also after a refill. */
        public int $window,
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        return new self(
            Json::int($x, 'reservation'),
            Json::int($x, 'chat'),
            Json::string($x, 'kind'),
            Pockets::fromArray(Json::array($x, 'charged')),
            Json::time($x, 'committed_at'),
            Json::int($x, 'units'),
            Pockets::fromArray(Json::array($x, 'released')),
            Json::int($x, 'window'),
        );
    }
}
