<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 409 too_late: a cancel of a job a worker already started, under its kind's
 * `refuse` policy; nothing changed.
 */
final class TooLateException extends ChargeonceException
{
    public const ERROR = 'too_late';
}
