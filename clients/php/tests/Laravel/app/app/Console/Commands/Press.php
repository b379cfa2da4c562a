<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace App\Console\Commands;

use App\Jobs\Generate;
use Chargeonce\Exception\BusyException;
use Chargeonce\Exception\InsufficientFundsException;
use Chargeonce\Exception\InsufficientImagesException;
use Chargeonce\Exception\InsufficientMessagesException;
use Chargeonce\Laravel\Facades\Chargeonce;
use Illuminate\Console\Command;

/** The gateway: a user pressed a button. Reserves and dispatches the job to the queue the plan chose. */
final class Press extends Command
{
    /** @var string */
    protected $signature = 'demo:press {chat} {kind} {request_id} {--mode=ok} {--delay=0}';

    /** @var string */
    protected $description = 'Reserve for a job and dispatch it, as a bot handler does';

    public function handle(): int
    {
        try {
            $reservation = Chargeonce::reserve((int) $this->argument('chat'), (string) $this->argument('kind'),
                requestId: (string) $this->argument('request_id'));
        } catch (BusyException) {
            $this->line('refused=busy');
            return 3;
        } catch (InsufficientMessagesException | InsufficientImagesException | InsufficientFundsException $e) {
            $this->line("refused=$e->error");
            return 3;
        }
        Generate::dispatch($reservation, (string) $this->option('mode'))
            ->onQueue($reservation->queue)
            ->delay((int) $this->option('delay'));
        $this->line("reservation=$reservation->id queue=$reservation->queue");
        return 0;
    }
}
