<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Laravel\Unit;

use Chargeonce\Client;
use Chargeonce\Exception\ConnectionException;
use Chargeonce\Http\Response;
use Chargeonce\Laravel\Events\JobDropped;
use Chargeonce\Laravel\ReservationMiddleware;
use Chargeonce\Reservation;
use Chargeonce\RetryPolicy;
use Chargeonce\Tests\Laravel\Support\FakeQueueJob;
use Chargeonce\Tests\Laravel\Support\PaidJob;
use Chargeonce\Tests\Support\FakeTransport;
use Chargeonce\Tests\Support\Fixtures;
use Illuminate\Events\Dispatcher;
use PHPUnit\Framework\TestCase;
use Psr\Log\NullLogger;

/**
 * What the middleware asks the server around a job's handle(), and when it
 * deletes a delivery unrun: against a scripted server (FakeTransport).
 */
final class ReservationMiddlewareTest extends TestCase
{
    private FakeTransport $server;
    /** @var list<JobDropped> */
    private array $dropped = [];
    /** The middleware's clock, in seconds. */
    private float $now = 1000.0;

    /** @param list<Response|\Throwable> $answers */
    private function middleware(array $answers, float $heartbeatInterval = 0.0): ReservationMiddleware
    {
        $this->server = new FakeTransport($answers);
        $client = new Client('http://fake', workerToken: 'wk-token', transport: $this->server,
            retry: new RetryPolicy(maxAttempts: 1));
        $events = new Dispatcher();
        $events->listen(JobDropped::class, function (JobDropped $e): void {
            $this->dropped[] = $e;
        });
        return new ReservationMiddleware($client, $events, new NullLogger(), $heartbeatInterval,
            fn (): float => $this->now);
    }

    /** @param ?\Closure(PaidJob): void $body */
    private static function job(?\Closure $body = null, string $id = '7', int $attempt = 1): PaidJob
    {
        $job = new PaidJob(Reservation::fromArray(Fixtures::reservation()), $body);
        $job->setJob(new FakeQueueJob($id, $attempt));
        return $job;
    }

    private static function ok(array $with = []): Response
    {
        return FakeTransport::json(200, Fixtures::reservation(['status' => 'in_progress'] + $with));
    }

    private static function receipt(): Response
    {
        return FakeTransport::json(200, Fixtures::receipt());
    }

    /** @return list<string> each request as "METHOD path" */
    private function calls(): array
    {
        return array_map(static fn ($r): string => "$r->method $r->path", $this->server->requests);
    }

    /** @return list<array<mixed>> each request's JSON body */
    private function bodies(): array
    {
        return array_map(static fn ($r): array => json_decode($r->body ?? '{}', true), $this->server->requests);
    }

    private static function through(ReservationMiddleware $m, PaidJob $job): mixed
    {
        return $m->handle($job, static function (PaidJob $j): string {
            $j->handle();
            return 'done';
        });
    }

    public function testStartsArmsTheLeaseRunsAndCommitsUnderOneWorkerIdentity(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::receipt()]);
        $job = self::job();
        self::assertSame('done', self::through($m, $job));
        self::assertSame(1, $job->handled);
        self::assertSame([
            'POST /v1/chats/42/reservations/17/start',
            'POST /v1/chats/42/reservations/17/heartbeat',
            'POST /v1/chats/42/reservations/17/commit',
        ], $this->calls());
        $workers = array_unique(array_column($this->bodies(), 'worker'));
        self::assertCount(1, $workers, 'every call names the same worker');
        self::assertStringEndsWith(':database:7:1', $workers[0], 'the identity names the job id and attempt');
        self::assertArrayNotHasKey('units', $this->bodies()[2], 'no units: the whole hold');
        self::assertFalse($job->job->isDeleted(), 'Laravel deletes a job that ran');
        self::assertSame([], $this->dropped);
    }

    /** @return iterable<string, array{int, string}> */
    public static function mustNotRun(): iterable
    {
        yield 'cancelled while queued, or failed' => [404, 'not_found'];
        yield 'released by the sweep' => [410, 'expired'];
        yield 'another delivery runs it' => [409, 'already_started'];
        yield 'committed already' => [409, 'invalid_state'];
    }

    /** @dataProvider mustNotRun */
    public function testADeliveryWhoseStartIsRefusedIsDeletedUnrun(int $status, string $error): void
    {
        $m = $this->middleware([FakeTransport::error($status, $error)]);
        $job = self::job();
        self::assertNull(self::through($m, $job));
        self::assertSame(0, $job->handled, 'handle() must not run');
        self::assertTrue($job->job->isDeleted());
        self::assertSame(['POST /v1/chats/42/reservations/17/start'], $this->calls(), 'nothing committed or failed');
        self::assertCount(1, $this->dropped);
        self::assertSame($error, $this->dropped[0]->reason);
        self::assertFalse($this->dropped[0]->ran);
    }

    public function testAnExceptionFailsTheReservationAndIsRethrown(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::ok(['status' => 'failed'])]);
        $job = self::job(static fn () => throw new \DomainException('the provider refused'));
        try {
            self::through($m, $job);
            self::fail('the job\'s exception was swallowed');
        } catch (\DomainException $e) {
            self::assertSame('the provider refused', $e->getMessage());
        }
        self::assertSame('POST /v1/chats/42/reservations/17/fail', $this->calls()[2]);
        self::assertCount(3, $this->calls(), 'no commit');
        self::assertFalse($job->job->isDeleted(), 'Laravel decides: retry (which then finds it failed) or fail');
    }

    public function testAFailThatFailsLeavesTheJobsOwnExceptionToLaravel(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), new ConnectionException('reset', 56)]);
        $this->expectException(\DomainException::class);
        self::through($m, self::job(static fn () => throw new \DomainException('the provider refused')));
    }

    public function testTheUnitsTheJobReportsAreCommitted(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::receipt()]);
        self::through($m, self::job(static fn (PaidJob $j) => $j->callChargeUnits(2)));
        self::assertSame(2, $this->bodies()[2]['units']);
    }

    public function testChargingNoUnitsIsAnError(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::ok(['status' => 'failed'])]);
        $this->expectException(\InvalidArgumentException::class);
        self::through($m, self::job(static fn (PaidJob $j) => $j->callChargeUnits(0)));
    }

    public function testUncertainKeepsTheHoldAndNeitherCommitsNorFails(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::ok(['status' => 'outcome_unknown'])]);
        self::through($m, self::job(static fn (PaidJob $j) => $j->callUncertain('prov-17')));
        self::assertSame('POST /v1/chats/42/reservations/17/uncertain', $this->calls()[2]);
        self::assertSame('prov-17', $this->bodies()[2]['provider_ref']);
        self::assertCount(3, $this->calls());
    }

    public function testUncertainThenAnExceptionDoesNotFail(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::ok(['status' => 'outcome_unknown'])]);
        try {
            self::through($m, self::job(static function (PaidJob $j): void {
                $j->callUncertain('prov-17');
                throw new \RuntimeException('timed out');
            }));
            self::fail('the exception was swallowed');
        } catch (\RuntimeException) {
        }
        self::assertCount(3, $this->calls(), 'no fail after uncertain');
    }

    public function testACancelRequestFailsTheReservationAndDeletesTheJob(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::ok(['cancel_requested' => true]), self::ok()]);
        $reachedAfterHeartbeat = false;
        $job = self::job(static function (PaidJob $j) use (&$reachedAfterHeartbeat): void {
            $j->callHeartbeat();
            $reachedAfterHeartbeat = true;
        });
        self::assertNull(self::through($m, $job));
        self::assertFalse($reachedAfterHeartbeat, 'the heartbeat reports the cancel request');
        self::assertSame('POST /v1/chats/42/reservations/17/fail', $this->calls()[3]);
        self::assertTrue($job->job->isDeleted());
        self::assertSame('cancel_requested', $this->dropped[0]->reason);
    }

    public function testACancelBeforeTheFirstHeartbeatFailsUnrun(): void
    {
        $m = $this->middleware([self::ok(), self::ok(['cancel_requested' => true]), self::ok()]);
        $job = self::job();
        self::assertNull(self::through($m, $job));
        self::assertSame(0, $job->handled);
        self::assertSame('POST /v1/chats/42/reservations/17/fail', $this->calls()[2]);
        self::assertTrue($job->job->isDeleted());
        self::assertSame('cancel_requested', $this->dropped[0]->reason);
    }

    public function testHeartbeatsInATightLoopAskTheServerOncePerInterval(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::ok(), self::receipt()], heartbeatInterval: 1.0);
        self::through($m, self::job(function (PaidJob $j): void {
            $j->callHeartbeat(); // right after the one that armed the lease: not sent
            $this->now += 0.5;
            $j->callHeartbeat(); // not sent
            $this->now += 0.5;
            $j->callHeartbeat(); // sent: a second since the last answer
            $j->callHeartbeat(); // not sent
        }));
        self::assertSame([
            'POST /v1/chats/42/reservations/17/start',
            'POST /v1/chats/42/reservations/17/heartbeat',
            'POST /v1/chats/42/reservations/17/heartbeat',
            'POST /v1/chats/42/reservations/17/commit',
        ], $this->calls());
    }

    public function testALostReservationStopsTheJobWithoutCommitOrFail(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), FakeTransport::error(410, 'expired')]);
        $job = self::job(static fn (PaidJob $j) => $j->callHeartbeat());
        self::assertNull(self::through($m, $job));
        self::assertCount(3, $this->calls());
        self::assertTrue($job->job->isDeleted());
        self::assertSame('expired', $this->dropped[0]->reason);
    }

    public function testAHeartbeatWithoutAnAnswerLetsTheJobGoOn(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), new ConnectionException('reset', 56), self::receipt()]);
        self::through($m, self::job(static fn (PaidJob $j) => $j->callHeartbeat()));
        self::assertSame('POST /v1/chats/42/reservations/17/commit', $this->calls()[3]);
    }

    public function testAStartWithoutAnAnswerIsRethrownUnrunAndNotDeleted(): void
    {
        $m = $this->middleware([new ConnectionException('refused', 7)]);
        $job = self::job();
        try {
            self::through($m, $job);
            self::fail('no exception');
        } catch (ConnectionException) {
        }
        self::assertSame(0, $job->handled);
        self::assertFalse($job->job->isDeleted(), 'Laravel delivers it again later');
    }

    public function testACommitThatFindsTheReservationExpiredDeletesTheJobThatRan(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), FakeTransport::error(410, 'expired')]);
        $job = self::job();
        self::through($m, $job);
        self::assertSame(1, $job->handled);
        self::assertTrue($job->job->isDeleted(), 'running it again would pay the provider twice');
        self::assertTrue($this->dropped[0]->ran);
    }

    public function testTheHelpersNeedTheMiddleware(): void
    {
        $job = self::job();
        $this->expectException(\LogicException::class);
        $this->expectExceptionMessage('ReservationMiddleware');
        $job->callHeartbeat();
    }

    public function testTheHelpersAreDetachedAfterTheRun(): void
    {
        $m = $this->middleware([self::ok(), self::ok(), self::receipt()]);
        $job = self::job();
        self::through($m, $job);
        $this->expectException(\LogicException::class);
        $job->callWorkerIdentity();
    }

    public function testTheTraitBringsTheMiddlewareAndQueuesOnlyTheIds(): void
    {
        $job = new PaidJob(Reservation::fromArray(Fixtures::reservation()));
        self::assertInstanceOf(ReservationMiddleware::class, $job->middleware()[0]);
        self::assertSame([42, 17], [$job->chargeonceChat, $job->chargeonceReservation]);
        $copy = unserialize(serialize($job));
        self::assertSame([42, 17], [$copy->chargeonceChat, $copy->chargeonceReservation]);
    }
}
