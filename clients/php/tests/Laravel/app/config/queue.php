<?php
// SPDX-License-Identifier: Apache-2.0
// The database driver. retry_after is above chargeonce's lease_duration plus
// sweep_interval (config/chargeonce.php, the server's timers): a job whose
// worker was killed is redelivered after the server released its
// reservation.

declare(strict_types=1);

return [
    'default' => 'database',
    'connections' => [
        'database' => [
            'driver' => 'database',
            'connection' => 'sqlite',
            'table' => 'jobs',
            'queue' => 'default',
            'retry_after' => (int) env('QUEUE_RETRY_AFTER', 6),
            'after_commit' => false,
        ],
    ],
    'failed' => [
        'driver' => 'database-uuids',
        'database' => 'sqlite',
        'table' => 'failed_jobs',
    ],
];
