<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 500 internal: a bug in the server, logged there under the id the message
 * names; the operation may or may not have been written. Not retried: check
 * with status first.
 */
final class InternalException extends ChargeonceException
{
    public const ERROR = 'internal';
}
