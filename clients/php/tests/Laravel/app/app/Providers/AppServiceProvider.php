<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace App\Providers;

use App\Records;
use Chargeonce\Laravel\Events\EventReceived;
use Chargeonce\Laravel\Events\JobDropped;
use Chargeonce\Laravel\Events\QueueNotice;
use Illuminate\Support\Facades\Event;
use Illuminate\Support\ServiceProvider;

final class AppServiceProvider extends ServiceProvider
{
    public function boot(): void
    {
        // The delayed "you are in the queue" message: a bot would send it to
        // the chat; here it is recorded for the test to find.
        Event::listen(static function (QueueNotice $notice): void {
            Records::append('notices', ['chat' => $notice->chat, 'reservation' => $notice->reservation,
                'message' => 'You are in the queue, this will take a while.']);
        });
        Event::listen(static function (EventReceived $received): void {
            $e = $received->event;
            Records::append('events', ['event' => $e->event, 'event_id' => $e->event_id, 'chat' => $e->chat,
                'reservation' => $e->reservation]);
        });
        Event::listen(static function (JobDropped $dropped): void {
            Records::append('drops', ['chat' => $dropped->chat, 'reservation' => $dropped->reservation,
                'reason' => $dropped->reason, 'ran' => $dropped->ran, 'worker' => $dropped->worker]);
        });
    }
}
