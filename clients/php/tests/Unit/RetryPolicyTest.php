<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Unit;

use Chargeonce\Exception\BusyException;
use Chargeonce\Exception\ConnectionException;
use Chargeonce\Exception\InternalException;
use Chargeonce\Exception\OverloadedException;
use Chargeonce\Exception\RequestTimeoutException;
use Chargeonce\Exception\StorageUnavailableException;
use Chargeonce\RetryPolicy;
use PHPUnit\Framework\TestCase;

final class RetryPolicyTest extends TestCase
{
    public function testDelaysDoubleFromTheBaseUpToTheCap(): void
    {
        $policy = new RetryPolicy(baseDelay: 0.1, maxDelay: 1.0, random: static fn (): float => 0.0);

        $delays = array_map($policy->delay(...), [1, 2, 3, 4, 5, 6]);

        self::assertEqualsWithDelta([0.1, 0.2, 0.4, 0.8, 1.0, 1.0], $delays, 1e-9);
    }

    public function testJitterTakesAtMostItsShareOfTheDelay(): void
    {
        $most = new RetryPolicy(baseDelay: 0.4, jitter: 0.5, random: static fn (): float => 1.0);
        $none = new RetryPolicy(baseDelay: 0.4, jitter: 0.5, random: static fn (): float => 0.0);

        self::assertEqualsWithDelta(0.2, $most->delay(1), 1e-9);
        self::assertEqualsWithDelta(0.4, $none->delay(1), 1e-9);
    }

    public function testRetryAfterIsAFloorBoundedByTheCap(): void
    {
        $policy = new RetryPolicy(baseDelay: 0.1, maxDelay: 2.0, random: static fn (): float => 0.0);

        self::assertSame(1.0, $policy->delay(1, 1));
        self::assertSame(2.0, $policy->delay(1, 30));
    }

    public function testOnlyTransientErrorsAreRetriedAndOnlyWhileTriesAreLeft(): void
    {
        $policy = new RetryPolicy(maxAttempts: 3);

        self::assertTrue($policy->shouldRetry(new StorageUnavailableException('storage_unavailable', '', 503), 1));
        self::assertTrue($policy->shouldRetry(new OverloadedException('overloaded', '', 503), 1));
        self::assertTrue($policy->shouldRetry(new RequestTimeoutException('request_timeout', '', 503), 2));
        self::assertTrue($policy->shouldRetry(new ConnectionException('refused'), 2));
        self::assertFalse($policy->shouldRetry(new ConnectionException('refused'), 3));
        self::assertFalse($policy->shouldRetry(new BusyException('busy', '', 409), 1));
        self::assertFalse($policy->shouldRetry(new InternalException('internal', '', 500), 1));
        self::assertFalse(RetryPolicy::never()->shouldRetry(new ConnectionException('refused'), 1));
    }

    public function testWaitHandsTheDelayToTheSleeper(): void
    {
        $slept = [];
        $policy = new RetryPolicy(
            baseDelay: 0.25,
            sleeper: static function (float $s) use (&$slept): void {
                $slept[] = $s;
            },
            random: static fn (): float => 0.0,
        );

        $policy->wait(1);
        $policy->wait(2, 1);

        self::assertSame([0.25, 1.0], $slept);
    }

    public function testNonsenseIsRefused(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        new RetryPolicy(maxAttempts: 0);
    }
}
