<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * Every error the client reports: an answer of the server
 * ({"error": NAME, "message": …} with its HTTP status) or a transport failure
 * (ConnectionException, status 0). Catch a subclass for one error name, this
 * class for all of them. An error name this client does not know (a newer
 * server's) arrives as this class itself, its name in $error.
 */
class ChargeonceException extends \RuntimeException
{
    /** The error name this class stands for; the base class: any. */
    public const ERROR = '';

    /**
     * @param string $error the API's error name, e.g. "busy"
     * @param string $message the server's context for people ("chat 42 has reservation 17")
     * @param int $status the HTTP status; 0 when no answer came
     * @param ?int $retryAfter the Retry-After header's seconds, when the server sent one
     */
    public function __construct(
        public readonly string $error,
        string $message,
        public readonly int $status,
        public readonly ?int $retryAfter = null,
        ?\Throwable $previous = null,
    ) {
        parent::__construct($message, $status, $previous);
    }
}
