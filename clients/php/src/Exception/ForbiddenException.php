<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 403 forbidden: a token of another role, or the route's role has no token
 * configured on the server.
 */
final class ForbiddenException extends ChargeonceException
{
    public const ERROR = 'forbidden';
}
