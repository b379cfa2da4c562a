<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 404 no_route: the server has no such route (a client newer than its
 * server?).
 */
final class NoRouteException extends ChargeonceException
{
    public const ERROR = 'no_route';
}
