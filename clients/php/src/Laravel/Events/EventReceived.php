<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel\Events;

use Chargeonce\Event;

/**
 * Every event of the server's stream, dispatched by `php artisan
 * chargeonce:listen` (reservation_released, cancel_requested,
 * reconcile_needed, limits_refilled, credits_expired, credits_expiring,
 * balance_low, queue_notice, and any a newer server adds: check
 * `$event->event`). A listener that throws
 * stops the command before the event's id is stored: the event is
 * delivered again when it restarts.
 */
final class EventReceived
{
    public function __construct(public readonly Event $event)
    {
    }
}
