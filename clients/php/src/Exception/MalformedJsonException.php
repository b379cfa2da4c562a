<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 400 malformed_json: the request body is not JSON. */
final class MalformedJsonException extends ChargeonceException
{
    public const ERROR = 'malformed_json';
}
