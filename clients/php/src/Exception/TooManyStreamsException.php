<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/** 503 too_many_streams: `http-max-streams` event streams are open already. */
final class TooManyStreamsException extends ChargeonceException
{
    public const ERROR = 'too_many_streams';
}
