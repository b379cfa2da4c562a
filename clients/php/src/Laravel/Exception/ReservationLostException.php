<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel\Exception;

use Chargeonce\Exception\ChargeonceException;

/**
 * A heartbeat found the reservation no longer this worker's: the sweep
 * released it (`expired`: the lease ran out), another delivery runs it
 * (`already_started`) or it is gone (`not_found`). Nothing this job does can
 * be charged any more: stop. The middleware deletes the job without
 * committing or failing.
 */
final class ReservationLostException extends \RuntimeException
{
    /** @param string $error the API's error name */
    public function __construct(public readonly string $error, ChargeonceException $previous)
    {
        parent::__construct("the reservation is no longer this worker's ($error): " . $previous->getMessage(), 0,
            $previous);
    }
}
