<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace App\Console\Commands;

use Chargeonce\Laravel\Facades\Chargeonce;
use Illuminate\Console\Command;

/** The user's cancel button. */
final class Cancel extends Command
{
    /** @var string */
    protected $signature = 'demo:cancel {chat} {request_id}';

    /** @var string */
    protected $description = 'Cancel the job of a request id';

    public function handle(): int
    {
        $r = Chargeonce::cancel((int) $this->argument('chat'), (string) $this->argument('request_id'));
        $this->line("reservation=$r->id status=$r->status");
        return 0;
    }
}
