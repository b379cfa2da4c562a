<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * An answer this client cannot read: a success that is not the documented
 * JSON (a field missing or of another type), or an error that is not
 * {"error", "message"} (e.g. a proxy's HTML page). Never retried: the same
 * request would most likely get the same answer.
 */
final class UnexpectedResponseException extends ChargeonceException
{
    public const ERROR = 'unexpected_response';

    public function __construct(string $message, int $status)
    {
        parent::__construct(self::ERROR, $message, $status);
    }
}
