<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace App\Jobs;

use App\Records;
use Chargeonce\Laravel\ChargesOnce;
use Chargeonce\Reservation;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/**
 * A paid generation: calls the provider stub once (a line in
 * provider.jsonl), then behaves as `$mode` says: ok (done at once), slow
 * (about 3 s of work with heartbeats), hang (works, heartbeating, until
 * killed; 50 s at most), throw (the provider refused), uncertain (the
 * provider timed out).
 */
final class Generate implements ShouldQueue
{
    use Dispatchable;
    use InteractsWithQueue;
    use Queueable;
    use ChargesOnce;

    /** Laravel may retry a job that threw: the retry must find the reservation ended and not run. */
    public int $tries = 3;

    public function __construct(Reservation $reservation, public string $mode = 'ok')
    {
        $this->chargeFor($reservation);
    }

    public function handle(): void
    {
        Records::append('provider', [
            'chat' => $this->chargeonceChat, 'reservation' => $this->chargeonceReservation, 'mode' => $this->mode,
            'queue' => $this->job?->getQueue(), 'attempt' => $this->attempts(), 'worker' => $this->workerIdentity(),
        ]);
        match ($this->mode) {
            'ok' => null,
            'slow' => $this->work(3.0),
            'hang' => $this->work(50.0),
            'throw' => throw new \RuntimeException('the provider refused the prompt'),
            'uncertain' => $this->uncertain("prov-$this->chargeonceReservation"),
            default => throw new \InvalidArgumentException("unknown mode $this->mode"),
        };
    }

    private function work(float $seconds): void
    {
        $until = microtime(true) + $seconds;
        while (microtime(true) < $until) {
            usleep(500_000);
            $this->heartbeat(); // well within the 3 s lease
        }
    }
}
