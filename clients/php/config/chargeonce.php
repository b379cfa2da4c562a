<?php
// SPDX-License-Identifier: Apache-2.0
// chargeonce for Laravel: publish with
//   php artisan vendor:publish --tag=chargeonce-config
// and set the values from the environment.

declare(strict_types=1);

return [
    // The server's HTTP port (docs/http.md), e.g. http://127.0.0.1:8080.
    'url' => env('CHARGEONCE_URL', 'http://127.0.0.1:8080'),

    // One bearer token per role. Give each process only its role's: a web
    // or bot process the gateway's, a queue worker the worker's. A role
    // without a token gets 401 from the server.
    'tokens' => [
        'gateway' => env('CHARGEONCE_GATEWAY_TOKEN'),
        'worker' => env('CHARGEONCE_WORKER_TOKEN'),
        'admin' => env('CHARGEONCE_ADMIN_TOKEN'),
    ],

    // Seconds to connect, and per try of a request.
    'connect_timeout' => (float) env('CHARGEONCE_CONNECT_TIMEOUT', 5.0),
    'timeout' => (float) env('CHARGEONCE_TIMEOUT', 15.0),

    // Retries of the operations that are safe to repeat (the package's
    // README, "Retries"): tries in all, and the backoff in seconds.
    'retry' => [
        'max_attempts' => (int) env('CHARGEONCE_RETRY_MAX_ATTEMPTS', 5),
        'base_delay' => (float) env('CHARGEONCE_RETRY_BASE_DELAY', 0.1),
        'max_delay' => (float) env('CHARGEONCE_RETRY_MAX_DELAY', 2.0),
    ],

    // A job's $this->heartbeat() asks the server at most once per this many
    // seconds, so a job may call it in every turn of a loop; keep it well
    // below lease_duration. A cancel request is seen within it.
    'heartbeat_interval' => (float) env('CHARGEONCE_HEARTBEAT_INTERVAL', 1.0),

    // The server's queue names (a reservation's `queue`: KIND_generation,
    // KIND_generation_priority for premium chats, or what `kinds.NAME.queue`
    // says) mapped to this application's queue names; a name not listed is
    // used as it is.
    'queues' => [
        // 'image_generation_priority' => 'images-fast',
    ],

    // These must be the server's --lease-duration and --sweep-interval, in
    // seconds. A worker killed mid-job is released by the server when its
    // lease has run out and the next sweep came: after at most their sum.
    // The queue connections below must redeliver a job later than that
    // (their retry_after), so that the redelivered job finds its
    // reservation released (expired) and is dropped, instead of finding it
    // still running; the service provider refuses to start otherwise.
    'server' => [
        'lease_duration' => (float) env('CHARGEONCE_LEASE_DURATION', 30),
        'sweep_interval' => (float) env('CHARGEONCE_SWEEP_INTERVAL', 60),
    ],

    // The queue connections (config/queue.php) that run chargeonce jobs;
    // null: the default connection.
    'queue_connections' => null,

    // chargeonce:listen (the event stream): where it keeps the id of the
    // last durable event it handled, to resume after it.
    'events' => [
        'cache_store' => env('CHARGEONCE_EVENTS_CACHE_STORE'), // null: the default cache store
        'cursor_key' => 'chargeonce:last_event_id',
    ],
];
