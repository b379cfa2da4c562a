<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Laravel\Unit;

use Chargeonce\Laravel\WorkerIdentity;
use Chargeonce\Tests\Laravel\Support\FakeQueueJob;
use PHPUnit\Framework\TestCase;

/** One identity per delivery: the same for one delivery's calls, another for any other delivery. */
final class WorkerIdentityTest extends TestCase
{
    public function testOneDeliveryHasOneIdentity(): void
    {
        self::assertSame(
            WorkerIdentity::of(new FakeQueueJob('7', 1), 'host', 10),
            WorkerIdentity::of(new FakeQueueJob('7', 1), 'host', 10),
        );
        self::assertSame('laravel:host:10:database:7:1', WorkerIdentity::of(new FakeQueueJob('7', 1), 'host', 10));
    }

    public function testARedeliveryAnotherCopyOrAnotherProcessIsAnotherIdentity(): void
    {
        $first = WorkerIdentity::of(new FakeQueueJob('7', 1), 'host', 10);
        self::assertNotSame($first, WorkerIdentity::of(new FakeQueueJob('7', 2), 'host', 10), 'the next attempt');
        self::assertNotSame($first, WorkerIdentity::of(new FakeQueueJob('8', 1), 'host', 10), 'a copy in another row');
        self::assertNotSame($first, WorkerIdentity::of(new FakeQueueJob('7', 1), 'host', 11), 'another worker');
    }

    public function testAJobWithoutAQueueGetsAnIdentityOfItsOwn(): void
    {
        self::assertNotSame(WorkerIdentity::of(null), WorkerIdentity::of(null));
    }

    public function testALongIdentityIsHashedWithinTheServersLimit(): void
    {
        $identity = WorkerIdentity::of(new FakeQueueJob(str_repeat('x', 300), 1), 'host', 10);
        self::assertLessThanOrEqual(WorkerIdentity::BYTES_MAX, strlen($identity));
        self::assertNotSame($identity, WorkerIdentity::of(new FakeQueueJob(str_repeat('x', 300), 2), 'host', 10));
    }
}
