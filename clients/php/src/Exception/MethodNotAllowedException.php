<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 405 method_not_allowed: the route exists with other methods. */
final class MethodNotAllowedException extends ChargeonceException
{
    public const ERROR = 'method_not_allowed';
}
