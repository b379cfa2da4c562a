<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 409 busy: every slot of the chat is taken (the message says how many jobs
 * are active); nothing changed.
 */
final class BusyException extends ChargeonceException
{
    public const ERROR = 'busy';
}
