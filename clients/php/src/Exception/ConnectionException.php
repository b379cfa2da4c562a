<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * No answer: the connection could not be made, broke, or the request timed
 * out. The request may or may not have reached the server, so its outcome is
 * unknown: retry with the same ids. Its error name is "connection" (the
 * CLI's), its status 0, its code curl's error number in $curlErrno.
 */
final class ConnectionException extends ChargeonceException implements TransientException
{
    public const ERROR = 'connection';

    public function __construct(string $message, public readonly int $curlErrno = 0)
    {
        parent::__construct(self::ERROR, $message, 0);
    }
}
