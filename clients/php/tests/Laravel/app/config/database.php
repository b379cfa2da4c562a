<?php
// SPDX-License-Identifier: Apache-2.0
// The queue's database: SQLite, one file the test script names. Two
// workers write to it at once: a locked database waits (PDO's timeout is
// SQLite's busy timeout). When both pop at once, one may still get
// "database is locked" (SQLite does not let a read transaction write past
// another's write): its transaction is rolled back, and Laravel's worker
// logs the error and polls again a second later. Nothing is lost.

declare(strict_types=1);

return [
    'default' => 'sqlite',
    'connections' => [
        'sqlite' => [
            'driver' => 'sqlite',
            'database' => env('DB_DATABASE', storage_path('queue.sqlite')),
            'prefix' => '',
            'foreign_key_constraints' => true,
            'options' => [PDO::ATTR_TIMEOUT => 30],
        ],
    ],
    'migrations' => 'migrations',
];
