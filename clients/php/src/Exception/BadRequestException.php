<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 400 bad_request: a broken request line or body. */
final class BadRequestException extends ChargeonceException
{
    public const ERROR = 'bad_request';
}
