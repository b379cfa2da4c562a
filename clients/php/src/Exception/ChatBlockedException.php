<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 403 chat_blocked: reserve for a chat an administrator blocked. */
final class ChatBlockedException extends ChargeonceException
{
    public const ERROR = 'chat_blocked';
}
