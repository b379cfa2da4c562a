<?php
// SPDX-License-Identifier: Apache-2.0
// The package's config/chargeonce.php as an application publishes it, set
// from the environment the test script gives: the server's URL, tokens and
// timers.

declare(strict_types=1);

return [
    'url' => env('CHARGEONCE_URL'),
    'tokens' => [
        'gateway' => env('CHARGEONCE_GATEWAY_TOKEN'),
        'worker' => env('CHARGEONCE_WORKER_TOKEN'),
        'admin' => env('CHARGEONCE_ADMIN_TOKEN'),
    ],
    'connect_timeout' => 5.0,
    'timeout' => 15.0,
    'retry' => ['max_attempts' => 5, 'base_delay' => 0.1, 'max_delay' => 2.0],
    'heartbeat_interval' => 1.0,
    'queues' => [],
    'server' => [
        'lease_duration' => (float) env('CHARGEONCE_LEASE_DURATION', 3),
        'sweep_interval' => (float) env('CHARGEONCE_SWEEP_INTERVAL', 1),
    ],
    'queue_connections' => ['database'],
    'events' => ['cache_store' => 'file', 'cursor_key' => 'chargeonce:last_event_id'],
];
