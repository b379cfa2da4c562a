<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/** A chat's pockets, plan, flags, limit and active jobs (touch, status and the admin calls). */
final readonly class ChatStatus
{
    /**
     * @param array<string, int> $pockets every pocket of the server's catalog, by name
     * @param list<Reservation> $reservations every active job, oldest first
     */
    public function __construct(
        public int $chat,
        public int $daily_messages,
        public int $daily_images,
        public int $balance,
        public array $pockets,
        /** free or premium. */
        public string $plan,
        public bool $premium,
        public ?\DateTimeImmutable $premium_until,
        public bool $started,
        public bool $blocked,
        public bool $banned,
        /** The current window's number: 0 when registered, one more at every refill. */
        public int $window,
        public ?\DateTimeImmutable $window_started_at,
        public ?\DateTimeImmutable $last_activity_at,
        /** The oldest active job, or null. */
        public ?Reservation $reservation,
        public int $max_active_jobs,
        /** What the active holds take from the current pockets (a past window's hold: its balance part). */
        public Pockets $held,
        /** The pockets less what is held. */
        public Pockets $available,
        public array $reservations,
        /** @var list<Grant> the grants with credits left, in spending order */
        public array $grants = [],
        /**
         * balance_low comes when the available balance falls below this: the
         * chat's own threshold, else the server's; 0: never.
         */
        public int $balance_low_threshold = 0,
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        $active = Json::arrayOrNull($x, 'reservation');
        return new self(
            Json::int($x, 'chat'),
            Json::int($x, 'daily_messages'),
            Json::int($x, 'daily_images'),
            Json::int($x, 'balance'),
            Json::amounts($x, 'pockets'),
            Json::string($x, 'plan'),
            Json::bool($x, 'premium'),
            Json::timeOrNull($x, 'premium_until'),
            Json::bool($x, 'started'),
            Json::bool($x, 'blocked'),
            Json::bool($x, 'banned'),
            Json::int($x, 'window'),
            Json::timeOrNull($x, 'window_started_at'),
            Json::timeOrNull($x, 'last_activity_at'),
            $active === null ? null : Reservation::fromArray($active),
            Json::int($x, 'max_active_jobs'),
            Pockets::fromArray(Json::array($x, 'held')),
            Pockets::fromArray(Json::array($x, 'available')),
            array_map(Reservation::fromArray(...), array_values(Json::array($x, 'reservations'))),
            // A server before credit grants sends none.
            array_map(Grant::fromArray(...), array_values(Json::arrayOrNull($x, 'grants') ?? [])),
            Json::intOrNull($x, 'balance_low_threshold') ?? 0,
        );
    }
}
