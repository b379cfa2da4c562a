<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Laravel;

use Chargeonce\Client;
use Chargeonce\Exception\AlreadyStartedException;
use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\ExpiredException;
use Chargeonce\Exception\InvalidStateException;
use Chargeonce\Exception\NotFoundException;
use Chargeonce\Laravel\Events\JobDropped;
use Chargeonce\Laravel\Exception\CancelRequestedException;
use Chargeonce\Laravel\Exception\ReservationLostException;
use Illuminate\Container\Container;
use Illuminate\Contracts\Config\Repository;
use Illuminate\Contracts\Events\Dispatcher;
use Illuminate\Contracts\Queue\Job;
use Psr\Log\LoggerInterface;

/**
 * The job middleware of a job that uses ChargesOnce. Before handle() it
 * starts the reservation under this delivery's worker identity; a delivery
 * whose reservation is gone (cancelled while queued, or ended), released
 * by the sweep (expired) or run by another delivery (already_started) is
 * deleted unrun. After handle() it commits (the units the job reported, or
 * all); when handle() throws it fails the reservation and rethrows, so
 * Laravel reports and retries as it does — a retry then finds the
 * reservation ended and is deleted. A worker killed mid-job runs none of
 * this: the server's lease and sweep release the reservation, and the
 * redelivered job finds it expired.
 */
final class ReservationMiddleware
{
    /** heartbeat()'s least interval when config('chargeonce.heartbeat_interval') has none. */
    public const HEARTBEAT_INTERVAL = 1.0;

    /**
     * @param ?Client $client null: the container's (the service provider binds it)
     * @param ?Dispatcher $events null: the container's, if any (JobDropped)
     * @param ?LoggerInterface $log null: the container's, if any
     * @param ?float $heartbeatInterval seconds; null: config('chargeonce.heartbeat_interval')
     * @param ?\Closure(): float $clock seconds (tests)
     */
    public function __construct(
        private readonly ?Client $client = null,
        private readonly ?Dispatcher $events = null,
        private readonly ?LoggerInterface $log = null,
        private readonly ?float $heartbeatInterval = null,
        private readonly ?\Closure $clock = null,
    ) {
    }

    public function handle(object $job, callable $next): mixed
    {
        if (!method_exists($job, 'attachReservationRun')) {
            throw new \LogicException(get_class($job) . ' does not use ' . ChargesOnce::class);
        }
        /** @var int $chat */
        $chat = $job->chargeonceChat;
        /** @var int $reservation */
        $reservation = $job->chargeonceReservation;
        if ($reservation <= 0) {
            throw new \LogicException(get_class($job) . ' was dispatched without chargeFor($reservation)');
        }
        $queueJob = self::queueJob($job);
        $run = new ReservationRun($this->client(), $chat, $reservation, WorkerIdentity::of($queueJob),
            $this->heartbeatInterval(), $this->clock);

        try {
            $started = $run->start();
        } catch (NotFoundException | ExpiredException | AlreadyStartedException | InvalidStateException $e) {
            // Cancelled while queued, ended already, swept, or another
            // delivery runs it: this delivery must not run at all.
            $this->drop($job, $queueJob, $run, $e->error, $e->getMessage());
            return null;
        }
        // Any other error (no answer after the client's retries) escapes
        // unrun: Laravel delivers the job again later, under a new attempt.
        if ($started->cancel_requested) {
            // The user cancelled between the start and the heartbeat that
            // armed the lease: nothing was done yet, so nothing is charged.
            $cancelled = new CancelRequestedException($chat, $reservation);
            $this->failQuietly($run, $cancelled);
            $this->drop($job, $queueJob, $run, 'cancel_requested', $cancelled->getMessage());
            return null;
        }

        $job->attachReservationRun($run);
        try {
            $result = $next($job);
        } catch (CancelRequestedException $e) {
            $this->failQuietly($run, $e);
            $this->drop($job, $queueJob, $run, 'cancel_requested', $e->getMessage());
            return null;
        } catch (ReservationLostException $e) {
            $this->drop($job, $queueJob, $run, $e->error, $e->getMessage());
            return null;
        } catch (\Throwable $e) {
            $this->failQuietly($run, $e);
            throw $e;
        } finally {
            $job->attachReservationRun(null);
        }

        if ($run->isOpen()) {
            try {
                $run->commit();
            } catch (ExpiredException | AlreadyStartedException | NotFoundException $e) {
                // The work is done but the reservation is no longer ours (no
                // heartbeat within the lease): nothing is charged. Running it
                // again would pay the provider twice: delete it.
                $this->drop($job, $queueJob, $run, $e->error, 'done, not charged: ' . $e->getMessage(), ran: true);
            }
            // Anything else (no answer after retries): rethrown. A retry of
            // the job finds the reservation started by this delivery
            // (already_started) or committed (invalid_state) and is deleted.
        }
        return $result;
    }

    private function client(): Client
    {
        return $this->client ?? Container::getInstance()->make(Client::class);
    }

    private function heartbeatInterval(): float
    {
        if ($this->heartbeatInterval !== null) {
            return $this->heartbeatInterval;
        }
        $config = self::fromContainer('config');
        $seconds = $config instanceof Repository ? $config->get('chargeonce.heartbeat_interval') : null;
        return is_numeric($seconds) ? (float) $seconds : self::HEARTBEAT_INTERVAL;
    }

    /** The Laravel queue job of a job using InteractsWithQueue; null when it runs without a queue. */
    private static function queueJob(object $job): ?Job
    {
        $queueJob = property_exists($job, 'job') ? $job->job : null;
        return $queueJob instanceof Job ? $queueJob : null;
    }

    /** Releases the hold after a failure; an error doing so is logged, the job's own error is what counts. */
    private function failQuietly(ReservationRun $run, \Throwable $cause): void
    {
        if (!$run->isOpen()) {
            return; // the job ended it itself (uncertain), or it is no longer ours
        }
        try {
            $run->fail();
        } catch (ChargeonceException $e) {
            // The sweep releases it anyway (lease, sweep-timeout).
            $this->logger()?->warning('chargeonce: failing the reservation failed', [
                'chat' => $run->chat, 'reservation' => $run->reservation, 'error' => $e->error,
                'message' => $e->getMessage(), 'job_error' => $cause->getMessage(),
            ]);
        }
    }

    /** Deletes the delivery from its queue and says why (log, JobDropped). */
    private function drop(
        object $job,
        ?Job $queueJob,
        ReservationRun $run,
        string $reason,
        string $message,
        bool $ran = false,
    ): void {
        $queueJob?->delete();
        $this->logger()?->info(sprintf('chargeonce: job deleted %s (%s)', $ran ? 'after running' : 'unrun', $reason), [
            'job' => get_class($job), 'chat' => $run->chat, 'reservation' => $run->reservation,
            'worker' => $run->worker, 'message' => $message,
        ]);
        $this->dispatcher()?->dispatch(
            new JobDropped($job, $run->chat, $run->reservation, $run->worker, $reason, $ran),
        );
    }

    private function dispatcher(): ?Dispatcher
    {
        return $this->events ?? self::fromContainer(Dispatcher::class);
    }

    private function logger(): ?LoggerInterface
    {
        return $this->log ?? self::fromContainer(LoggerInterface::class);
    }

    /**
     * @template T of object
     * @param class-string<T> $id
     * @return ?T
     */
    private static function fromContainer(string $id): ?object
    {
        $container = Container::getInstance();
        return $container->bound($id) || $container->has($id) ? $container->make($id) : null;
    }
}
