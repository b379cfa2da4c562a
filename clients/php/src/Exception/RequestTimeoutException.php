<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 503 request_timeout: the server lost the answer; the outcome is unknown:
 * retry with the same ids.
 */
final class RequestTimeoutException extends ChargeonceException implements TransientException
{
    public const ERROR = 'request_timeout';
}
