<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel;

use Illuminate\Contracts\Queue\Job;

/**
 * The worker identity a queue job starts its reservation under: one per
 * delivery. The queue job's id and attempt tell deliveries of one message
 * apart (the database and Redis drivers count an attempt at every
 * delivery, a redelivery after retry_after included); the host and process
 * tell apart two copies of one message that a queue handed out under the
 * same id and attempt. Every call of the delivery (start, heartbeat,
 * commit, their retries) names the same identity; another delivery's
 * start is then already_started, and it is dropped.
 */
final class WorkerIdentity
{
    /** The server takes at most this many bytes. */
    public const BYTES_MAX = 256;

    /** @param ?Job $job null: a job run without a queue (dispatchSync): an identity of its own */
    public static function of(?Job $job, ?string $host = null, ?int $pid = null): string
    {
        $host ??= gethostname() ?: 'localhost';
        $pid ??= getmypid() ?: 0;
        $delivery = $job === null
            ? 'sync:' . bin2hex(random_bytes(8))
            : sprintf('%s:%s:%d', $job->getConnectionName() ?? 'queue', (string) $job->getJobId(), $job->attempts());
        $identity = "laravel:$host:$pid:$delivery";
        return strlen($identity) <= self::BYTES_MAX ? $identity : 'laravel:' . hash('sha256', $identity);
    }
}
