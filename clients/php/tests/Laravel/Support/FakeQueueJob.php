<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Laravel\Support;

use Illuminate\Container\Container;
use Illuminate\Contracts\Queue\Job as JobContract;
use Illuminate\Queue\Jobs\Job;

/** One delivery of a queued job, as a driver's Job class has it: an id, an attempt, delete(). */
final class FakeQueueJob extends Job implements JobContract
{
    public function __construct(private readonly string $id, private readonly int $attempt)
    {
        $this->container = new Container();
        $this->connectionName = 'database';
        $this->queue = 'image_generation';
    }

    public function getJobId(): string
    {
        return $this->id;
    }

    public function getRawBody(): string
    {
        return '{}';
    }

    public function attempts(): int
    {
        return $this->attempt;
    }
}
