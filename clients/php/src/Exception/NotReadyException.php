<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 503 not_ready (/readyz): the server's actors are down, Postgres does not
 * answer or a migration is missing.
 */
final class NotReadyException extends ChargeonceException
{
    public const ERROR = 'not_ready';
}
