<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel\Exception;

/**
 * config/chargeonce.php or config/queue.php would break a guarantee (a
 * redelivered job that finds its reservation still running): the service
 * provider refuses to start with it.
 */
final class ConfigurationException extends \RuntimeException
{
}
