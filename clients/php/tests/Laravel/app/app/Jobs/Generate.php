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
 * provider.jsonl), then behaves as `$mode` says: ok (done at once), wait
 * (works, heartbeating, until the test creates the file finish-RESERVATION
 * next to the records: the test decides when it ends, not a clock), hang
 * (works, heartbeating, until killed or cancelled), throw (the provider
 * refused), uncertain (the provider timed out).
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
            'wait' => $this->work(fn (): bool => is_file(Records::path("finish-$this->chargeonceReservation"))),
            'hang' => $this->work(static fn (): bool => false),
            'throw' => throw new \RuntimeException('the provider refused the prompt'),
            'uncertain' => $this->uncertain("prov-$this->chargeonceReservation"),
            default => throw new \InvalidArgumentException("unknown mode $this->mode"),
        };
    }

    /** @param \Closure(): bool $done */
    private function work(\Closure $done): void
    {
        // Below the workers' --timeout: a job the test forgot is an error, not a hang.
        $until = microtime(true) + 100;
        while (!$done()) {
            if (microtime(true) > $until) {
                throw new \RuntimeException("reservation $this->chargeonceReservation: the test never finished it");
            }
            usleep(250_000);
            $this->heartbeat(); // well within the 3 s lease
        }
    }
}
