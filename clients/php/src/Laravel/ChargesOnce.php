<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel;

use Chargeonce\Laravel\Exception\CancelRequestedException;
use Chargeonce\Laravel\Exception\ReservationLostException;
use Chargeonce\Reservation;

/**
 * A queued job paid by a chargeonce reservation:
 *
 *     final class Upscale implements ShouldQueue
 *     {
 *         use Dispatchable, InteractsWithQueue, Queueable, ChargesOnce;
 *
 *         public function __construct(Reservation $reservation, public string $image)
 *         {
 *             $this->chargeFor($reservation);
 *         }
 *
 *         public function handle(): void { … $this->heartbeat(); … }
 *     }
 *
 * Its middleware (ReservationMiddleware) starts the reservation before
 * handle() and commits it after, or fails it when handle() throws. A job
 * with middleware of its own lists `new ReservationMiddleware()` among it.
 * The job must use InteractsWithQueue: the middleware deletes a delivery
 * that must not run through it.
 */
trait ChargesOnce
{
    /** The chat the reservation holds on; queued with the job. */
    public int $chargeonceChat = 0;
    /** The reservation id; queued with the job. */
    public int $chargeonceReservation = 0;
    /** The running delivery, set by the middleware in the worker only. */
    private ?ReservationRun $chargeonceRun = null;

    /** The reservation that pays for this job (call it in the constructor). */
    protected function chargeFor(Reservation $reservation): void
    {
        $this->chargeonceChat = $reservation->chat;
        $this->chargeonceReservation = $reservation->id;
    }

    /** @return list<object> */
    public function middleware(): array
    {
        return [new ReservationMiddleware()];
    }

    /** @internal the middleware's hand-over of the running delivery */
    public function attachReservationRun(?ReservationRun $run): void
    {
        $this->chargeonceRun = $run;
    }

    /**
     * Renews the reservation's lease: call it at least every lease-duration
     * (the server's --lease-duration) in a long job, e.g. once per loop.
     *
     * @throws CancelRequestedException the user cancelled: let it escape (nothing is charged), or catch it
     *                                  and chargeUnits() what was done
     * @throws ReservationLostException the sweep released it or another delivery runs it: let it escape
     */
    protected function heartbeat(): void
    {
        $this->reservationRun()->heartbeat();
    }

    /** On success, charge `$units` of the hold (the rest is released) instead of all of it. */
    protected function chargeUnits(int $units): void
    {
        $this->reservationRun()->chargeUnits($units);
    }

    /**
     * The provider call's outcome is unknown (it timed out after the
     * request went out): the hold is kept until a reconciler asks the
     * provider by `$providerRef` (the idempotency key this job gave it) and
     * resolves it. Nothing is committed or failed after this.
     */
    protected function uncertain(string $providerRef): void
    {
        $this->reservationRun()->uncertain($providerRef);
    }

    /** The worker identity of this delivery (e.g. for the provider's idempotency key). */
    protected function workerIdentity(): string
    {
        return $this->reservationRun()->worker;
    }

    private function reservationRun(): ReservationRun
    {
        return $this->chargeonceRun ?? throw new \LogicException(
            static::class . ' runs without ReservationMiddleware: add it to middleware()');
    }
}
