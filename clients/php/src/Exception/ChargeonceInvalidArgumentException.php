<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 422 invalid_argument: a wrong type, a missing or unknown field, a value
 * out of range, a reserve without a request id where the chat's limit is
 * above 1; nothing changed. (Named so that it does not shadow PHP's own
 * \InvalidArgumentException in a `use` list.)
 */
final class ChargeonceInvalidArgumentException extends ChargeonceException
{
    public const ERROR = 'invalid_argument';
}
