<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Laravel\Unit;

use Chargeonce\Laravel\Exception\ConfigurationException;
use Chargeonce\Laravel\RetryAfterRule;
use PHPUnit\Framework\TestCase;

/** retry_after must be longer than the lease plus the sweep interval. */
final class RetryAfterRuleTest extends TestCase
{
    /** @return array<mixed> config('queue') */
    private static function queue(mixed $retryAfter, string $driver = 'database'): array
    {
        $connection = ['driver' => $driver, 'table' => 'jobs'];
        if ($retryAfter !== null) {
            $connection['retry_after'] = $retryAfter;
        }
        return ['default' => 'database', 'connections' => ['database' => $connection, 'sync' => ['driver' => 'sync']]];
    }

    /** @return array<mixed> config('chargeonce') */
    private static function chargeonce(float $lease = 30, float $sweep = 60, ?array $connections = null): array
    {
        return [
            'server' => ['lease_duration' => $lease, 'sweep_interval' => $sweep],
            'queue_connections' => $connections,
        ];
    }

    public function testLongerThanTheLeasePlusTheSweepPasses(): void
    {
        RetryAfterRule::check(self::queue(91), self::chargeonce());
        RetryAfterRule::check(self::queue(5), self::chargeonce(3, 1));
        $this->addToAssertionCount(2);
    }

    /** @return iterable<string, array{mixed}> */
    public static function tooShort(): iterable
    {
        yield 'equal' => [90];
        yield 'shorter' => [60];
        yield 'Laravel\'s default of 60 s' => [null];
        yield 'not a number' => ['soon'];
    }

    /** @dataProvider tooShort */
    public function testNotLongerIsRefused(mixed $retryAfter): void
    {
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage('queue connection "database": retry_after');
        RetryAfterRule::check(self::queue($retryAfter), self::chargeonce());
    }

    public function testRedisAndBeanstalkdAreCheckedSyncIsNot(): void
    {
        foreach (['redis', 'beanstalkd'] as $driver) {
            try {
                RetryAfterRule::check(self::queue(10, $driver), self::chargeonce());
                self::fail("$driver was not checked");
            } catch (ConfigurationException) {
            }
        }
        RetryAfterRule::check(self::queue(10), self::chargeonce(connections: ['sync']));
        $this->addToAssertionCount(1);
    }

    public function testTheListedConnectionsAreChecked(): void
    {
        $queue = self::queue(10);
        $queue['connections']['long'] = ['driver' => 'database', 'retry_after' => 100];
        RetryAfterRule::check($queue, self::chargeonce(connections: ['long']));
        $this->expectException(ConfigurationException::class);
        RetryAfterRule::check($queue, self::chargeonce(connections: ['long', 'database']));
    }

    public function testAnUnknownConnectionIsRefused(): void
    {
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage('does not define');
        RetryAfterRule::check(self::queue(100), self::chargeonce(connections: ['redis']));
    }

    public function testTimersMustBePositive(): void
    {
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage('chargeonce.server.lease_duration');
        RetryAfterRule::check(self::queue(100), self::chargeonce(lease: 0));
    }
}
