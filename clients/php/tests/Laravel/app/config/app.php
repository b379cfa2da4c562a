<?php
// SPDX-License-Identifier: Apache-2.0
// A console-only application: queue, database, cache, events, log.

declare(strict_types=1);

return [
    'name' => 'chargeonce-laravel-test',
    'env' => 'testing',
    'debug' => true,
    'url' => 'http://localhost',
    'timezone' => 'UTC',
    'locale' => 'en',
    'fallback_locale' => 'en',
    'key' => 'base64:' . base64_encode(str_repeat('k', 32)),
    'cipher' => 'AES-256-CBC',
    'providers' => [
        Illuminate\Bus\BusServiceProvider::class,
        Illuminate\Cache\CacheServiceProvider::class,
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class,
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Encryption\EncryptionServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        Illuminate\Foundation\Providers\FoundationServiceProvider::class,
        Illuminate\Pipeline\PipelineServiceProvider::class,
        Illuminate\Queue\QueueServiceProvider::class,
        Chargeonce\Laravel\ChargeonceServiceProvider::class,
        App\Providers\AppServiceProvider::class,
    ],
    'aliases' => [
        'Chargeonce' => Chargeonce\Laravel\Facades\Chargeonce::class,
    ],
];
