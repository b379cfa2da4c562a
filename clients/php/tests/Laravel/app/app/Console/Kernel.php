<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace App\Console;

use Illuminate\Foundation\Console\Kernel as ConsoleKernel;

final class Kernel extends ConsoleKernel
{
    /** @var list<class-string> */
    protected $commands = [
        Commands\SetUpChat::class,
        Commands\Press::class,
        Commands\Cancel::class,
        Commands\Charges::class,
    ];
}
