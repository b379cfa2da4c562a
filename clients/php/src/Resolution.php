<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/** How a job of unknown outcome was resolved; a retried resolve answers the first. */
final readonly class Resolution
{
    public function __construct(
        public int $reservation,
        public int $chat,
        public string $kind,
        /** succeeded (charged like a commit) or failed (nothing charged). */
        public string $outcome,
        public Pockets $charged,
        public Pockets $released,
        /** The units charged; 0 for failed. */
        public int $units,
        public \DateTimeImmutable $resolved_at,
        public string $provider_ref,
        /** The window whose daily pockets paid: the hold's. */
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
            Json::string($x, 'outcome'),
            Pockets::fromArray(Json::array($x, 'charged')),
            Pockets::fromArray(Json::array($x, 'released')),
            Json::int($x, 'units'),
            Json::time($x, 'resolved_at'),
            Json::string($x, 'provider_ref'),
            Json::int($x, 'window'),
        );
    }
}
