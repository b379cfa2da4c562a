<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel;

use Chargeonce\Client;
use Chargeonce\Exception\AlreadyStartedException;
use Chargeonce\Exception\ExpiredException;
use Chargeonce\Exception\InvalidStateException;
use Chargeonce\Exception\NotFoundException;
use Chargeonce\Exception\TransientException;
use Chargeonce\Laravel\Exception\CancelRequestedException;
use Chargeonce\Laravel\Exception\ReservationLostException;
use Chargeonce\Receipt;
use Chargeonce\Reservation;

/**
 * One delivery of a job working on its reservation, under one worker
 * identity: start (and arm the lease), heartbeats, then exactly one of
 * commit, fail or uncertain. The middleware drives it; the job reaches it
 * through the ChargesOnce trait.
 */
final class ReservationRun
{
    /** started: the job may end it; then committed, failed, uncertain, or lost (no longer ours). */
    private string $state = 'new';
    /** What the job reported to charge; null: the whole hold. */
    private ?int $units = null;
    /** When the last heartbeat was answered (the clock's seconds); null: none yet. */
    private ?float $lastHeartbeat = null;
    /** @var \Closure(): float */
    private readonly \Closure $clock;

    /**
     * @param float $heartbeatInterval heartbeat() asks the server at most once per this many seconds
     * @param ?\Closure(): float $clock seconds (tests); default microtime(true)
     */
    public function __construct(
        private readonly Client $client,
        public readonly int $chat,
        public readonly int $reservation,
        public readonly string $worker,
        private readonly float $heartbeatInterval = 0.0,
        ?\Closure $clock = null,
    ) {
        $this->clock = $clock ?? static fn (): float => microtime(true);
    }

    public function state(): string
    {
        return $this->state;
    }

    /** True while the run still has to commit, fail or mark it uncertain. */
    public function isOpen(): bool
    {
        return $this->state === 'started';
    }

    /**
     * queued → in_progress under this worker, then one heartbeat: the
     * server arms the lease at the first heartbeat, and without it a worker
     * killed now would hold the chat's slot until sweep-timeout (minutes)
     * instead of lease-duration plus one sweep.
     *
     * @throws NotFoundException|ExpiredException|AlreadyStartedException|InvalidStateException the job must not run
     */
    public function start(): Reservation
    {
        $started = $this->client->start($this->chat, $this->reservation, worker: $this->worker);
        $this->state = 'started';
        try {
            $started = $this->client->heartbeat($this->chat, $this->reservation, worker: $this->worker);
            $this->lastHeartbeat = ($this->clock)();
        } catch (TransientException) {
            // Started, the lease not armed yet: the job's own heartbeats, or
            // sweep-timeout, arm it. Not worth dropping a started job over.
        } catch (NotFoundException | ExpiredException | AlreadyStartedException | InvalidStateException $e) {
            $this->state = 'lost';
            throw $e;
        }
        return $started;
    }

    /**
     * Renews the lease. Call it at least every lease-duration in a long job,
     * and as often as is convenient: within heartbeatInterval of the last
     * answer it returns at once, asking nothing (a cancel request is then
     * seen at the next one).
     *
     * @throws CancelRequestedException the user cancelled: stop
     * @throws ReservationLostException the sweep released it, or another delivery runs it: stop, nothing is charged
     */
    public function heartbeat(): void
    {
        $this->requireOpen('heartbeat');
        $now = ($this->clock)();
        if ($this->lastHeartbeat !== null && $now - $this->lastHeartbeat < $this->heartbeatInterval) {
            return;
        }
        try {
            $answer = $this->client->heartbeat($this->chat, $this->reservation, worker: $this->worker);
            $this->lastHeartbeat = $now;
        } catch (TransientException) {
            return; // the next heartbeat, or the commit, will tell
        } catch (NotFoundException | ExpiredException | AlreadyStartedException | InvalidStateException $e) {
            $this->state = 'lost';
            throw new ReservationLostException($e->error, $e);
        }
        if ($answer->cancel_requested) {
            throw new CancelRequestedException($this->chat, $this->reservation);
        }
    }

    /** Charge `$units` (fewer than held: the rest is released) instead of the whole hold. */
    public function chargeUnits(int $units): void
    {
        if ($units < 1) {
            // The server refuses 0: a job that did nothing fails instead.
            throw new \InvalidArgumentException("units must be at least 1, got $units; a job that did nothing throws");
        }
        $this->requireOpen('chargeUnits');
        $this->units = $units;
    }

    /**
     * The provider's outcome is unknown (a timeout after the call went
     * out): the slot is freed, the hold kept until a reconciler resolves it.
     */
    public function uncertain(string $providerRef): Reservation
    {
        $this->requireOpen('uncertain');
        $answer = $this->client->uncertain($this->chat, $this->reservation, $providerRef, worker: $this->worker);
        $this->state = 'uncertain';
        return $answer;
    }

    /** The job succeeded: charge the units it reported, or the whole hold. */
    public function commit(): Receipt
    {
        $this->requireOpen('commit');
        $receipt = $this->client->commit($this->chat, $this->reservation, $this->units, worker: $this->worker);
        $this->state = 'committed';
        return $receipt;
    }

    /** The job failed: the hold is released, nothing charged. */
    public function fail(): Reservation
    {
        $this->requireOpen('fail');
        $answer = $this->client->fail($this->chat, $this->reservation, worker: $this->worker);
        $this->state = 'failed';
        return $answer;
    }

    private function requireOpen(string $what): void
    {
        if ($this->state !== 'started') {
            throw new \LogicException(
                "$what on reservation $this->reservation of chat $this->chat, which is $this->state",
            );
        }
    }
}
