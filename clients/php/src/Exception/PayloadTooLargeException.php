<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 413 payload_too_large: the body exceeds the server's `http-max-body`. */
final class PayloadTooLargeException extends ChargeonceException
{
    public const ERROR = 'payload_too_large';
}
