<?php
// SPDX-License-Identifier: Apache-2.0
// chargeonce:listen keeps its Last-Event-ID here.

declare(strict_types=1);

return [
    'default' => 'file',
    'stores' => [
        'file' => ['driver' => 'file', 'path' => storage_path('framework/cache/data')],
    ],
    'prefix' => 'chargeonce_test',
];
