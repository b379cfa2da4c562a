<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 401 unauthorized: no bearer token, or one the server does not know. */
final class UnauthorizedException extends ChargeonceException
{
    public const ERROR = 'unauthorized';
}
