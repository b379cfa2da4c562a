<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel\Exception;

/**
 * A heartbeat answered that the user cancelled the started job (its kind's
 * `cancel_after_start` is `request`). Let it escape handle(): the
 * middleware fails the reservation (nothing charged) and deletes the job.
 * A job whose provider already did some of the work catches it and calls
 * chargeUnits() for that part, then returns.
 */
final class CancelRequestedException extends \RuntimeException
{
    public function __construct(public readonly int $chat, public readonly int $reservation)
    {
        parent::__construct("the user cancelled reservation $reservation of chat $chat");
    }
}
