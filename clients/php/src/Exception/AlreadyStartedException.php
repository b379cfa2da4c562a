<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 409 already_started: another worker started this job (a job the queue
 * delivered twice): drop this delivery, change nothing.
 */
final class AlreadyStartedException extends ChargeonceException
{
    public const ERROR = 'already_started';
}
