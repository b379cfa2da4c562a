<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 402 insufficient_messages: a text job the chat cannot pay for. */
final class InsufficientMessagesException extends ChargeonceException
{
    public const ERROR = 'insufficient_messages';
}
