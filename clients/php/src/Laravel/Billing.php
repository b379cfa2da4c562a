<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel;

use Chargeonce\Client;
use Chargeonce\Reservation;

/**
 * What the `Chargeonce` facade stands for: the package's Client, built from
 * config/chargeonce.php, with a reserve() whose reservation names the
 * application's queue for the job. Every other Client method is passed on
 * as it is (Chargeonce::status($chat), Chargeonce::cancel($chat, $rid), …).
 *
 * @mixin Client
 */
final class Billing
{
    /** @param array<string, string> $queues the server's queue names mapped to the application's */
    public function __construct(private readonly Client $client, private readonly array $queues = [])
    {
    }

    /**
     * Holds the price of one job (Client::reserve); the reservation's
     * `queue` is the one the chat's plan chose (premium: the priority
     * queue), as config('chargeonce.queues') maps it. Dispatch the job
     * there: `Job::dispatch($reservation, …)->onQueue($reservation->queue)`.
     *
     * @throws \Chargeonce\Exception\BusyException every slot of the chat is taken
     * @throws \Chargeonce\Exception\InsufficientMessagesException and the other Insufficient*: the chat cannot pay
     */
    public function reserve(int $chat, string $kind, ?string $requestId = null, ?int $units = null): Reservation
    {
        return $this->onApplicationQueue($this->client->reserve($chat, $kind, $requestId, $units));
    }

    /** The client itself, e.g. for a method the facade would shadow. */
    public function client(): Client
    {
        return $this->client;
    }

    /** @param array<mixed> $arguments */
    public function __call(string $method, array $arguments): mixed
    {
        return $this->client->{$method}(...$arguments);
    }

    private function onApplicationQueue(Reservation $r): Reservation
    {
        $queue = $this->queues[$r->queue] ?? null;
        if ($queue === null || $queue === $r->queue) {
            return $r;
        }
        return new Reservation(
            $r->id, $r->chat, $r->kind, $r->status, $queue, $r->held, $r->request_id, $r->created_at,
            $r->lease_expires_at, $r->slot, $r->ended_at, $r->units, $r->cancel_requested, $r->window,
            $r->provider_ref, $r->uncertain_at,
        );
    }
}
