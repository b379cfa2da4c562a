<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 409 already_exists: create-chat of a chat that is registered. */
final class AlreadyExistsException extends ChargeonceException
{
    public const ERROR = 'already_exists';
}
