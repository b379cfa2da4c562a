<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\Errors;
use Chargeonce\Exception\TooManyStreamsException;
use Chargeonce\Exception\TransientException;
use Chargeonce\Http\CurlTransport;
use Chargeonce\Http\Request;
use Chargeonce\Http\Response;
use Chargeonce\Http\Transport;

/**
 * chargeonce's HTTP API (docs/http.md), one method per route, each
 * returning the answer as a typed object or throwing the error's exception
 * (Exception\ChargeonceException and its subclasses).
 *
 * The operations that are safe to repeat (Operation::retrySafe()) are tried
 * again after a transient error (no answer, storage_unavailable, overloaded,
 * request_timeout) as RetryPolicy says, each try the same request: the same
 * request id, payment id and worker. A reserve without a request id gets one
 * of the client's own (autoRequestId()), so that its retries find the job
 * the first try made. Cancel, create-chat and set-limits are never
 * repeated.
 *
 * A client is one keep-alive connection: use it from one process (PHP-FPM
 * worker, queue worker) for as many calls as it likes.
 */
final class Client
{
    private readonly Transport $transport;
    private readonly RetryPolicy $retry;

    /**
     * @param string $url the server's HTTP port, e.g. "http://127.0.0.1:8080"
     * @param ?string $gatewayToken for touch, reserve, cancel, status, events
     * @param ?string $workerToken for start, heartbeat, commit, fail, uncertain, resolve, unresolved
     * @param ?string $adminToken for create-chat, top-up, void-grant, premium, flags, limits, history, explain
     * @param float $connectTimeout seconds to connect
     * @param float $timeout seconds per try of a request (and to subscribe to events)
     * @param ?RetryPolicy $retry default: 5 tries, 0.1 s doubling up to 2 s
     * @param ?string $caFile the CA to trust for an HTTPS server with its own certificates
     * @param ?Transport $transport another transport (tests); default curl
     */
    public function __construct(
        string $url,
        private readonly ?string $gatewayToken = null,
        private readonly ?string $workerToken = null,
        private readonly ?string $adminToken = null,
        float $connectTimeout = 5.0,
        private readonly float $timeout = 15.0,
        ?RetryPolicy $retry = null,
        ?string $caFile = null,
        ?Transport $transport = null,
    ) {
        $this->transport = $transport ?? new CurlTransport($url, $connectTimeout, $timeout, $caFile);
        $this->retry = $retry ?? new RetryPolicy();
    }

    /**
     * A request id for a reserve whose caller gave none: "auto:" and 128
     * random bits in hex, like the C++ client's make_auto_request_id. The
     * server replays it like any other, but where the chat's limit is above
     * 1 it counts as none (invalid_argument): derive your own from the
     * user's intent (the message and the button) instead.
     */
    public static function autoRequestId(): string
    {
        return 'auto:' . bin2hex(random_bytes(16));
    }

    // -- gateway --------------------------------------------------------------

    /** A user update: registers an unknown chat and opens or refills its daily window. */
    public function touch(int $chat): ChatStatus
    {
        return ChatStatus::fromArray($this->call(Operation::Touch, 'POST', "/v1/chats/$chat/touch"));
    }

    /**
     * Holds the price of one job. A retry with the same request id returns
     * the same job, active or with how it ended.
     *
     * @param ?string $requestId the idempotency key, from the user's intent (e.g. "msg-18-upscale");
     *                           null: the client makes one (autoRequestId()) and keeps it for its retries
     * @param ?int $units what the job may cost at most (1…1,000,000); null: 1
     */
    public function reserve(int $chat, string $kind, ?string $requestId = null, ?int $units = null): Reservation
    {
        $body = ['kind' => $kind, 'request_id' => $requestId ?? self::autoRequestId()];
        if ($units !== null) {
            $body['units'] = $units;
        }
        return Reservation::fromArray($this->call(Operation::Reserve, 'POST', "/v1/chats/$chat/reservations", $body));
    }

    /**
     * Cancels the chat's only active job, or with `$requestId` the job of that
     * request id: a queued one is deleted; a started one is too_late, or
     * under its kind's `request` policy marked cancel_requested.
     */
    public function cancel(int $chat, ?string $requestId = null): Reservation
    {
        $query = $requestId === null ? '' : '?' . http_build_query(['request_id' => $requestId]);
        return Reservation::fromArray($this->call(Operation::Cancel, 'DELETE', "/v1/chats/$chat/reservation$query"));
    }

    /** Cancels job `$id` of the chat, as cancel() does. */
    public function cancelReservation(int $chat, int $id): Reservation
    {
        return Reservation::fromArray(
            $this->call(Operation::CancelReservation, 'DELETE', "/v1/chats/$chat/reservations/$id"),
        );
    }

    /** The chat's pockets, flags, limit and active jobs. */
    public function status(int $chat): ChatStatus
    {
        return ChatStatus::fromArray($this->call(Operation::Status, 'GET', "/v1/chats/$chat"));
    }

    /**
     * Opens the event stream and returns once the server subscribed it (no
     * event after that is missed: subscribe before you reserve).
     *
     * @param ?int $afterId the last durable event id handled: the stream first replays every kept event after it
     * @throws ChargeonceException 422 for an id beyond the newest event, 503 too_many_streams, no answer
     */
    public function events(?int $afterId = null): EventStream
    {
        $headers = $afterId === null ? [] : ['Last-Event-ID' => (string) $afterId];
        $stream = new EventStream(
            $this->transport->stream(new Request('GET', '/v1/events', $this->gatewayToken, null, $headers)),
            $afterId,
        );
        $stream->waitSubscribed($this->timeout);
        return $stream;
    }

    /**
     * Calls `$onEvent` with every event, each durable one once, for
     * `$seconds` (null: for ever) or until it returns false. When a stream
     * ends (server restart, overflow, subscription_ended, a broken or silent
     * connection) it opens another after the last id handled, waiting as the
     * retry policy says; it gives up after that many failures in a row with
     * no event between them. Returns the last durable event id handled:
     * store it and pass it as `$afterId` next time.
     *
     * @param callable(Event): (bool|null|void) $onEvent
     */
    public function listen(callable $onEvent, ?int $afterId = null, ?float $seconds = null): ?int
    {
        $until = $seconds === null ? INF : microtime(true) + $seconds;
        $last = $afterId;
        $failures = 0;
        while (microtime(true) < $until) {
            try {
                $stream = $this->events($last);
                try {
                    while (($left = $until - microtime(true)) > 0) {
                        $event = $stream->next(min(1.0, $left));
                        if ($event === null) {
                            continue;
                        }
                        $failures = 0;
                        $keepGoing = $onEvent($event);
                        // Handled: from here on a new stream starts after it.
                        $last = $event->event_id ?? $last;
                        if ($keepGoing === false) {
                            return $last;
                        }
                    }
                } finally {
                    $stream->close();
                }
            } catch (TransientException | TooManyStreamsException $e) {
                if (++$failures >= $this->retry->maxAttempts) {
                    throw $e;
                }
                $this->retry->wait($failures, $e instanceof ChargeonceException ? $e->retryAfter : null);
            }
        }
        return $last;
    }

    // -- worker ---------------------------------------------------------------

    /**
     * queued → in_progress. `$worker` names this attempt (e.g. the queue
     * job's id and attempt): once the job runs, a call naming another worker
     * is AlreadyStartedException (a job the queue delivered twice: drop it).
     */
    public function start(int $chat, int $id, ?string $worker = null): Reservation
    {
        return $this->step(Operation::Start, $chat, $id, 'start', self::worker([], $worker));
    }

    /** Renews a started job's lease; its answer carries cancel_requested once the user cancelled. */
    public function heartbeat(int $chat, int $id, ?string $worker = null): Reservation
    {
        return $this->step(Operation::Heartbeat, $chat, $id, 'heartbeat', self::worker([], $worker));
    }

    /**
     * Charges the hold (or what `$units` of it cost, the rest released). A
     * retry answers the first receipt and charges nothing more.
     */
    public function commit(int $chat, int $id, ?int $units = null, ?string $worker = null): Receipt
    {
        $body = self::worker($units === null ? [] : ['units' => $units], $worker);
        return Receipt::fromArray(
            $this->call(Operation::Commit, 'POST', "/v1/chats/$chat/reservations/$id/commit", $body),
        );
    }

    /** The job failed: the hold is released, nothing charged. */
    public function fail(int $chat, int $id, ?string $worker = null): Reservation
    {
        return $this->step(Operation::Fail, $chat, $id, 'fail', self::worker([], $worker));
    }

    /**
     * The provider call timed out, its outcome unknown: the slot is freed,
     * the hold kept until resolve(). `$providerRef` is the idempotency key
     * the worker gave its provider, to ask it later.
     */
    public function uncertain(int $chat, int $id, string $providerRef, ?string $worker = null): Reservation
    {
        return $this->step(Operation::Uncertain, $chat, $id, 'uncertain',
            self::worker(['provider_ref' => $providerRef], $worker));
    }

    /**
     * What the provider says of an uncertain job, recorded once.
     *
     * @param string $outcome "succeeded" (charged like a commit) or "failed" (released)
     * @param ?int $units succeeded only: what it cost, at most the units held
     */
    public function resolve(int $chat, int $id, string $outcome, ?int $units = null): Resolution
    {
        $body = ['outcome' => $outcome] + ($units === null ? [] : ['units' => $units]);
        return Resolution::fromArray(
            $this->call(Operation::Resolve, 'POST', "/v1/chats/$chat/reservations/$id/resolve", $body),
        );
    }

    /**
     * The jobs of unknown outcome of every chat after reservation id `$after`.
     *
     * @param ?int $limit 1…1,000; null: 100
     */
    public function unresolved(int $after = 0, ?int $limit = null): UnresolvedPage
    {
        $query = self::query(['status' => 'outcome_unknown', 'after' => $after, 'limit' => $limit]);
        return UnresolvedPage::fromArray($this->call(Operation::Unresolved, 'GET', "/v1/reservations$query"));
    }

    // -- admin ----------------------------------------------------------------

    /**
     * Registers a chat; AlreadyExistsException if it is.
     *
     * @param array<string, int> $pockets any other pocket of the server's catalog, by name
     * @param ?int $maxActiveJobs 1…64; null: the plan's
     */
    public function createChat(
        int $chat,
        ?int $dailyMessages = null,
        ?int $dailyImages = null,
        ?int $balance = null,
        \DateTimeInterface|string|null $premiumUntil = null,
        ?int $maxActiveJobs = null,
        array $pockets = [],
    ): ChatStatus {
        $body = array_filter([
            'chat' => $chat,
            'daily_messages' => $dailyMessages,
            'daily_images' => $dailyImages,
            'balance' => $balance,
            'premium_until' => $premiumUntil === null ? null : self::time($premiumUntil),
            'max_active_jobs' => $maxActiveJobs,
            'pockets' => $pockets === [] ? null : $pockets,
        ], static fn (mixed $v): bool => $v !== null);
        return ChatStatus::fromArray($this->call(Operation::CreateChat, 'POST', '/v1/chats', $body));
    }

    /**
     * Adds credits as a grant once per `$paymentId`; a retry with the same
     * terms answers the first receipt, other terms are invalid_argument.
     * Only the terms given are sent; the server's defaults apply to the rest.
     *
     * @param ?\DateTimeInterface $expiresAt when the grant expires, in the future; null: never (or `$expiresInMs`)
     * @param ?int $expiresInMs the grant expires this long after the top-up (1…3,155,760,000,000 ms);
     *     not with `$expiresAt`
     * @param ?int $priority 0…1,000, lower spends first; null: the server's 100
     * @param ?string $source purchase, promo or admin; null: purchase
     */
    public function topUp(
        int $chat,
        int $credits,
        string $paymentId,
        ?\DateTimeInterface $expiresAt = null,
        ?int $expiresInMs = null,
        ?int $priority = null,
        ?string $source = null,
    ): TopUp {
        $body = array_filter([
            'credits' => $credits,
            'payment_id' => $paymentId,
            'expires_at' => $expiresAt === null ? null : self::time($expiresAt),
            'expires_in_ms' => $expiresInMs,
            'priority' => $priority,
            'source' => $source,
        ], static fn (mixed $v): bool => $v !== null);
        return TopUp::fromArray($this->call(Operation::TopUp, 'POST', "/v1/chats/$chat/top-ups", $body));
    }

    /**
     * Voids grant `$grant` of the chat (a refund, a chargeback): what nobody
     * holds of it leaves the balance; holds on it finish, and what they
     * release is voided too. Answers the grant after the void; a second void
     * answers the same grant and changes nothing. NotFoundException when the
     * chat has no such grant.
     */
    public function voidGrant(int $chat, int $grant): Grant
    {
        return Grant::fromArray($this->call(Operation::VoidGrant, 'POST', "/v1/chats/$chat/grants/$grant/void"));
    }

    /**
     * Voids the grant the top-up of `$paymentId` made, as voidGrant() does.
     * NotFoundException when the chat has none (also for a top-up made
     * before grants).
     */
    public function voidGrantByPayment(int $chat, string $paymentId): Grant
    {
        $body = ['payment_id' => $paymentId];
        return Grant::fromArray($this->call(Operation::VoidGrant, 'POST', "/v1/chats/$chat/grants/void", $body));
    }

    /** Sets premium_until (premium is judged at reserve time). */
    public function setPremium(int $chat, \DateTimeInterface|string $until): ChatStatus
    {
        $body = ['until' => self::time($until)];
        return ChatStatus::fromArray($this->call(Operation::SetPremium, 'PUT', "/v1/chats/$chat/premium", $body));
    }

    /** Sets the flags given; null leaves one as it is. */
    public function setFlags(int $chat, ?bool $started = null, ?bool $blocked = null, ?bool $banned = null): ChatStatus
    {
        $body = array_filter(
            ['started' => $started, 'blocked' => $blocked, 'banned' => $banned],
            static fn (?bool $v): bool => $v !== null,
        );
        return ChatStatus::fromArray($this->call(Operation::SetFlags, 'PATCH', "/v1/chats/$chat/flags", $body));
    }

    /** How many jobs the chat may run at once (1…64); null: its plan's again. */
    public function setLimits(int $chat, ?int $maxActiveJobs): ChatStatus
    {
        $body = ['max_active_jobs' => $maxActiveJobs];
        return ChatStatus::fromArray($this->call(Operation::SetLimits, 'PUT', "/v1/chats/$chat/limits", $body));
    }

    /**
     * Below which available balance the chat gets balance_low (0 or more, 0
     * never); null: the server's balance-low-threshold again. Its job limit
     * stays as it is.
     */
    public function setBalanceLowThreshold(int $chat, ?int $threshold): ChatStatus
    {
        $body = ['balance_low_threshold' => $threshold];
        return ChatStatus::fromArray($this->call(Operation::SetLimits, 'PUT', "/v1/chats/$chat/limits", $body));
    }

    /**
     * One page of the chat's history, newest first.
     *
     * @param ?int $limit ledger rows, 1…1,000; null: 50
     * @param ?int $before the previous page's next_before; null: from the newest
     */
    public function history(int $chat, ?int $limit = null, ?int $before = null): HistoryPage
    {
        $query = self::query(['limit' => $limit, 'before' => $before]);
        return HistoryPage::fromArray($this->call(Operation::History, 'GET', "/v1/chats/$chat/history$query"));
    }

    /** The support view: status, plan and why, next refill, deadlines, the last 10 history entries. */
    public function explain(int $chat): Explanation
    {
        return Explanation::fromArray($this->call(Operation::Explain, 'GET', "/v1/chats/$chat/explain"));
    }

    // -- probes ---------------------------------------------------------------

    /** "ok" while the process runs. */
    public function healthz(): string
    {
        return Json::string($this->call(Operation::Healthz, 'GET', '/healthz'), 'status');
    }

    /** "ready" when the actors and Postgres answer; NotReadyException otherwise. */
    public function readyz(): string
    {
        return Json::string($this->call(Operation::Readyz, 'GET', '/readyz'), 'status');
    }

    /** The Prometheus text of every metric of the server's process. */
    public function metrics(): string
    {
        return $this->send(Operation::Metrics, new Request('GET', '/metrics'))->body;
    }

    // -- requests -------------------------------------------------------------

    /**
     * A worker's call on job `$id`: no body, or what `$body` says.
     *
     * @param array<string, mixed> $body
     */
    private function step(Operation $op, int $chat, int $id, string $verb, array $body): Reservation
    {
        return Reservation::fromArray($this->call($op, 'POST', "/v1/chats/$chat/reservations/$id/$verb", $body));
    }

    /**
     * Sends one operation and decodes its answer.
     *
     * @param ?array<string, mixed> $body null or []: no body
     * @return array<mixed>
     */
    private function call(Operation $op, string $method, string $path, ?array $body = null): array
    {
        $token = match ($op->role()) {
            'gateway' => $this->gatewayToken,
            'worker' => $this->workerToken,
            'admin' => $this->adminToken,
            default => null,
        };
        $json = $body === null || $body === [] ? null : self::encode($body);
        $response = $this->send($op, new Request($method, $path, $token, $json));
        return Json::decode($response->body, $response->status);
    }

    /**
     * Sends `$request`, and again while a retry-safe operation meets a
     * transient error and the policy allows: the same request every time.
     */
    private function send(Operation $op, Request $request): Response
    {
        for ($attempt = 1; ; ++$attempt) {
            try {
                $response = $this->transport->send($request);
                if ($response->status < 200 || $response->status >= 300) {
                    throw Errors::fromResponse($response);
                }
                return $response;
            } catch (ChargeonceException $e) {
                if (!$op->retrySafe() || !$this->retry->shouldRetry($e, $attempt)) {
                    throw $e;
                }
                $this->retry->wait($attempt, $e->retryAfter);
            }
        }
    }

    /**
     * @param array<string, mixed> $body
     * @return array<string, mixed>
     */
    private static function worker(array $body, ?string $worker): array
    {
        return $worker === null ? $body : $body + ['worker' => $worker];
    }

    /** @param array<string, int|string|null> $params the null ones left out */
    private static function query(array $params): string
    {
        $query = http_build_query(array_filter($params, static fn (mixed $v): bool => $v !== null));
        return $query === '' ? '' : '?' . $query;
    }

    /** @param array<string, mixed> $body */
    private static function encode(array $body): string
    {
        try {
            return json_encode($body, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
        } catch (\JsonException $e) {
            // Invalid UTF-8 in an id: a bug of the caller, never sent.
            throw new \InvalidArgumentException('cannot encode the request as JSON: ' . $e->getMessage(), 0, $e);
        }
    }

    /** ISO 8601 as the server reads it ("2026-12-07T05:10:44.331559Z"); a string is passed on as it is. */
    private static function time(\DateTimeInterface|string $t): string
    {
        return is_string($t) ? $t : $t->format('Y-m-d\TH:i:s.up');
    }
}
