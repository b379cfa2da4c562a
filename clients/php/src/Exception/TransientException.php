<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * The errors after which the same call may succeed: no answer
 * (ConnectionException), storage_unavailable, request_timeout (the outcome
 * is unknown) and overloaded (nothing was done). The client retries them for
 * the operations that are safe to repeat; a caller that sees one retries
 * later with the same ids (reserve with the same request id, commit the same
 * reservation), never with new ones.
 */
interface TransientException extends \Throwable
{
}
