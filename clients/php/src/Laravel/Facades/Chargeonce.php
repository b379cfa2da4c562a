<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel\Facades;

use Chargeonce\ChatStatus;
use Chargeonce\Client;
use Chargeonce\HistoryPage;
use Chargeonce\Reservation;
use Illuminate\Support\Facades\Facade;

/**
 * `Chargeonce::reserve($chat, 'image', requestId: "msg-$id-upscale")` and
 * every other method of Chargeonce\Client, on the client the service
 * provider built from config/chargeonce.php.
 *
 * @method static Reservation reserve(int $chat, string $kind, ?string $requestId = null, ?int $units = null)
 * @method static Reservation cancel(int $chat, ?string $requestId = null)
 * @method static ChatStatus status(int $chat)
 * @method static ChatStatus touch(int $chat)
 * @method static HistoryPage history(int $chat, ?int $limit = null, ?int $before = null)
 * @method static Client client()
 *
 * @see \Chargeonce\Laravel\Billing
 */
final class Chargeonce extends Facade
{
    protected static function getFacadeAccessor(): string
    {
        return 'chargeonce';
    }
}
