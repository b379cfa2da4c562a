<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/** One page of the jobs of unknown outcome of every chat, by id (for reconcilers). */
final readonly class UnresolvedPage
{
    /** @param list<Reservation> $reservations each with provider_ref and uncertain_at */
    public function __construct(
        public array $reservations,
        /** The last id of this page, the next page's `after`; null on an empty page. */
        public ?int $next_after,
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        return new self(
            array_map(Reservation::fromArray(...), array_values(Json::array($x, 'reservations'))),
            Json::intOrNull($x, 'next_after'),
        );
    }
}
