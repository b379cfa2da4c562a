<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel\Events;

/**
 * The server's queue_notice, dispatched by `php artisan chargeonce:listen`:
 * the job is still active queue-notice-delay after its reserve. Listen to
 * it to tell the user "you are in the queue, this will take a while" — a
 * user whose job already ended gets no such event.
 */
final class QueueNotice
{
    public function __construct(public readonly int $chat, public readonly int $reservation)
    {
    }
}
