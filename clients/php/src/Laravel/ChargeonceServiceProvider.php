<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel;

use Chargeonce\Client;
use Chargeonce\Laravel\Console\ListenCommand;
use Chargeonce\RetryPolicy;
use Illuminate\Support\ServiceProvider;

/**
 * Binds one Chargeonce\Client per process (one kept-alive connection) built
 * from config/chargeonce.php, and the `Chargeonce` facade's Billing on it;
 * publishes the config (tag chargeonce-config); registers
 * `chargeonce:listen`. Refuses to boot when a queue connection's
 * retry_after breaks RetryAfterRule.
 */
final class ChargeonceServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->mergeConfigFrom(self::configFile(), 'chargeonce');
        $this->app->singleton(Client::class, static fn ($app): Client => self::client($app['config']['chargeonce']));
        $this->app->singleton('chargeonce', static fn ($app): Billing => new Billing(
            $app->make(Client::class),
            $app['config']['chargeonce.queues'] ?? [],
        ));
        $this->app->alias('chargeonce', Billing::class);
    }

    public function boot(): void
    {
        RetryAfterRule::check($this->app['config']['queue'] ?? [], $this->app['config']['chargeonce'] ?? []);
        $this->publishes([self::configFile() => $this->app->configPath('chargeonce.php')], 'chargeonce-config');
        if ($this->app->runningInConsole()) {
            $this->commands([ListenCommand::class]);
        }
    }

    /** @param array<mixed> $config config('chargeonce') */
    public static function client(array $config): Client
    {
        $retry = $config['retry'] ?? [];
        return new Client(
            (string) ($config['url'] ?? ''),
            gatewayToken: self::token($config, 'gateway'),
            workerToken: self::token($config, 'worker'),
            adminToken: self::token($config, 'admin'),
            connectTimeout: (float) ($config['connect_timeout'] ?? 5.0),
            timeout: (float) ($config['timeout'] ?? 15.0),
            retry: new RetryPolicy(
                maxAttempts: (int) ($retry['max_attempts'] ?? 5),
                baseDelay: (float) ($retry['base_delay'] ?? 0.1),
                maxDelay: (float) ($retry['max_delay'] ?? 2.0),
            ),
        );
    }

    private static function configFile(): string
    {
        return dirname(__DIR__, 2) . '/config/chargeonce.php';
    }

    /** @param array<mixed> $config */
    private static function token(array $config, string $role): ?string
    {
        $token = $config['tokens'][$role] ?? null;
        return is_string($token) && $token !== '' ? $token : null;
    }
}
