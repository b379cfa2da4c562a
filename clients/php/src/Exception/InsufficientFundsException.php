<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 402 insufficient_funds: a job of another kind of the server's catalog the
 * chat cannot pay for.
 */
final class InsufficientFundsException extends ChargeonceException
{
    public const ERROR = 'insufficient_funds';
}
