<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 503 overloaded: back-pressure, the server's queue to Postgres is full;
 * nothing was done: retry later.
 */
final class OverloadedException extends ChargeonceException implements TransientException
{
    public const ERROR = 'overloaded';
}
