<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 403 chat_banned: reserve for a chat an administrator banned. */
final class ChatBannedException extends ChargeonceException
{
    public const ERROR = 'chat_banned';
}
