<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 404 not_found: an unknown chat, or a reservation that is gone (drop the
 * job).
 */
final class NotFoundException extends ChargeonceException
{
    public const ERROR = 'not_found';
}
