<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel;

use Chargeonce\Laravel\Exception\ConfigurationException;

/**
 * A queue redelivers a job whose worker died after retry_after. The server
 * releases that worker's reservation once its lease ran out and a sweep
 * came: after at most lease-duration plus sweep-interval. Only a
 * redelivery later than that finds the reservation released (expired) and
 * is deleted for sure; an earlier one would find it still in progress,
 * still holding the chat's slot. So every queue connection that runs
 * chargeonce jobs needs retry_after > lease_duration + sweep_interval.
 */
final class RetryAfterRule
{
    /** Laravel's retry_after when a connection's config has none. */
    public const LARAVEL_DEFAULT = 60;

    /** The drivers that redeliver after retry_after (sqs uses the queue's visibility timeout, set in AWS). */
    private const DRIVERS = ['database', 'redis', 'beanstalkd'];

    /**
     * @param array<mixed> $queue config('queue')
     * @param array<mixed> $chargeonce config('chargeonce')
     * @throws ConfigurationException when a connection breaks the rule, or is not configured
     */
    public static function check(array $queue, array $chargeonce): void
    {
        $lease = self::seconds($chargeonce['server']['lease_duration'] ?? null, 'chargeonce.server.lease_duration');
        $sweep = self::seconds($chargeonce['server']['sweep_interval'] ?? null, 'chargeonce.server.sweep_interval');
        $names = $chargeonce['queue_connections'] ?? null;
        if ($names === null) {
            $names = isset($queue['default']) ? [$queue['default']] : [];
        }
        if (!is_array($names)) {
            throw new ConfigurationException('chargeonce.queue_connections must be a list of connection names or null');
        }
        foreach ($names as $name) {
            $connection = $queue['connections'][$name] ?? null;
            if (!is_array($connection)) {
                throw new ConfigurationException("chargeonce.queue_connections names \"$name\", "
                    . 'which config/queue.php does not define');
            }
            if (!in_array($connection['driver'] ?? null, self::DRIVERS, true)) {
                continue; // sync, null: nothing is redelivered; sqs: see DRIVERS
            }
            $retryAfter = $connection['retry_after'] ?? self::LARAVEL_DEFAULT;
            if (!is_numeric($retryAfter) || (float) $retryAfter <= $lease + $sweep) {
                throw new ConfigurationException(sprintf(
                    'queue connection "%s": retry_after (%s s) must be longer than chargeonce\'s lease_duration '
                    . 'plus sweep_interval (%s s + %s s, the server\'s --lease-duration and --sweep-interval): '
                    . 'a job redelivered sooner would find the reservation of its killed worker still running',
                    $name, var_export($retryAfter, true), $lease, $sweep,
                ));
            }
        }
    }

    private static function seconds(mixed $value, string $key): float
    {
        if (!is_numeric($value) || (float) $value <= 0) {
            throw new ConfigurationException("$key must be a positive number of seconds, got "
                . var_export($value, true));
        }
        return (float) $value;
    }
}
