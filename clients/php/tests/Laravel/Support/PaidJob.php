<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Laravel\Support;

use Chargeonce\Laravel\ChargesOnce;
use Chargeonce\Reservation;
use Illuminate\Queue\InteractsWithQueue;

/** A job using the trait, whose handle() runs the test's closure with the job's protected helpers at hand. */
final class PaidJob
{
    use InteractsWithQueue;
    use ChargesOnce;

    /** @var ?\Closure(self): void */
    private ?\Closure $body;
    public int $handled = 0;

    /** @param ?\Closure(self): void $body */
    public function __construct(Reservation $reservation, ?\Closure $body = null)
    {
        $this->chargeFor($reservation);
        $this->body = $body;
    }

    public function handle(): void
    {
        ++$this->handled;
        if ($this->body !== null) {
            ($this->body)($this);
        }
    }

    public function callHeartbeat(): void
    {
        $this->heartbeat();
    }

    public function callChargeUnits(int $units): void
    {
        $this->chargeUnits($units);
    }

    public function callUncertain(string $ref): void
    {
        $this->uncertain($ref);
    }

    public function callWorkerIdentity(): string
    {
        return $this->workerIdentity();
    }
}
