<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel\Events;

/**
 * ReservationMiddleware deleted a delivery of a job: unrun, because its
 * reservation is gone, ended, expired or run by another delivery, or the
 * user cancelled it mid-run; or, with $ran, after running, because the
 * reservation was no longer this worker's at commit.
 */
final class JobDropped
{
    public function __construct(
        /** The job object (its class and properties as queued). */
        public readonly object $job,
        public readonly int $chat,
        public readonly int $reservation,
        /** The worker identity of the dropped delivery. */
        public readonly string $worker,
        /** The API's error name (not_found, expired, already_started, invalid_state) or cancel_requested. */
        public readonly string $reason,
        /** True when handle() ran before the reservation turned out lost. */
        public readonly bool $ran = false,
    ) {
    }
}
