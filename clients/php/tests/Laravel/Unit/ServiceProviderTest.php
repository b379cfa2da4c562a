<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Laravel\Unit;

use Chargeonce\Client;
use Chargeonce\Laravel\Billing;
use Chargeonce\Laravel\ChargeonceServiceProvider;
use Chargeonce\Laravel\Exception\ConfigurationException;
use Chargeonce\Laravel\Facades\Chargeonce;
use Illuminate\Config\Repository;
use Illuminate\Foundation\Application;
use Illuminate\Support\Facades\Facade;
use PHPUnit\Framework\TestCase;

/** The provider in a real Laravel Application: its bindings, the merged config, the retry_after refusal. */
final class ServiceProviderTest extends TestCase
{
    protected function tearDown(): void
    {
        Facade::clearResolvedInstances();
        Facade::setFacadeApplication(null);
    }

    /** @param array<mixed> $queue config('queue') */
    private static function app(array $queue, array $chargeonce = []): Application
    {
        $app = new Application(sys_get_temp_dir());
        $app->instance('config', new Repository(['queue' => $queue, 'chargeonce' => $chargeonce]));
        Facade::setFacadeApplication($app);
        $app->register(ChargeonceServiceProvider::class);
        return $app;
    }

    /** @return array<mixed> */
    private static function database(int $retryAfter): array
    {
        return ['default' => 'database',
            'connections' => ['database' => ['driver' => 'database', 'retry_after' => $retryAfter]]];
    }

    public function testBindsOneClientAndTheFacadesBilling(): void
    {
        $app = self::app(self::database(120), ['url' => 'http://127.0.0.1:1', 'tokens' => ['gateway' => 'g']]);
        $app->boot();
        self::assertSame($app->make(Client::class), $app->make(Client::class), 'one client per process');
        self::assertInstanceOf(Billing::class, $app->make('chargeonce'));
        self::assertInstanceOf(Billing::class, Chargeonce::getFacadeRoot());
        self::assertSame(30.0, (float) $app['config']['chargeonce.server.lease_duration'], 'the package\'s defaults');
    }

    public function testLaravelsSkeletonRetryAfterIsRefusedWithTheServersDefaultTimers(): void
    {
        // 90 s (config/queue.php of a new application) = 30 s lease + 60 s sweep.
        $app = self::app(self::database(90));
        $this->expectException(ConfigurationException::class);
        $app->boot();
    }

    public function testTimersOfTheServersOwnAreTakenFromTheConfig(): void
    {
        $app = self::app(self::database(90), ['server' => ['lease_duration' => 20, 'sweep_interval' => 10]]);
        $app->boot();
        self::assertTrue($app->isBooted());
    }
}
