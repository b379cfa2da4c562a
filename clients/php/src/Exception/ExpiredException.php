<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 410 expired: the sweep released the reservation (its lease or deadline
 * passed); fenced off, nothing is charged: drop the job.
 */
final class ExpiredException extends ChargeonceException
{
    public const ERROR = 'expired';
}
