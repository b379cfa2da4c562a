<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 409 invalid_state: the job is not in the state the call needs (commit
 * before start, resolve of a job that is not uncertain, the other outcome
 * already recorded).
 */
final class InvalidStateException extends ChargeonceException
{
    public const ERROR = 'invalid_state';
}
