<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Unit;

use Chargeonce\Client;
use Chargeonce\Exception\BusyException;
use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\ConnectionException;
use Chargeonce\Exception\ExpiredException;
use Chargeonce\Exception\InternalException;
use Chargeonce\Exception\NotFoundException;
use Chargeonce\Exception\StorageUnavailableException;
use Chargeonce\Exception\UnexpectedResponseException;
use Chargeonce\Http\Request;
use Chargeonce\Http\Response;
use Chargeonce\Operation;
use Chargeonce\RetryPolicy;
use Chargeonce\Tests\Support\Calls;
use Chargeonce\Tests\Support\FakeTransport;
use Chargeonce\Tests\Support\Fixtures;
use PHPUnit\Framework\TestCase;

/** Which calls the client repeats, on which errors, how often, and that every try is the same request. */
final class ClientRetryTest extends TestCase
{
    /** @var list<float> the seconds the policy waited, in order */
    private array $slept = [];

    private function client(FakeTransport $transport, int $maxAttempts = 5): Client
    {
        $policy = new RetryPolicy(
            maxAttempts: $maxAttempts,
            sleeper: function (float $s): void {
                $this->slept[] = $s;
            },
            random: static fn (): float => 0.0, // no jitter: the delays are exact
        );
        return new Client('http://fake', 'gw-token', 'wk-token', 'ad-token', retry: $policy, transport: $transport);
    }

    /**
     * The errors after which a retry-safe call is repeated.
     *
     * @return array<string, array{\Closure(): (Response|\Throwable)}>
     */
    private static function transientErrors(): array
    {
        return [
            'storage_unavailable' => [static fn () => FakeTransport::error(503, 'storage_unavailable')],
            'overloaded' => [static fn () => FakeTransport::error(503, 'overloaded')],
            'request_timeout' => [static fn () => FakeTransport::error(503, 'request_timeout')],
            'no answer' => [static fn () => new ConnectionException('connection reset (test)', 56)],
        ];
    }

    /** @return iterable<string, array{string, \Closure(): (Response|\Throwable)}> */
    public static function retrySafeCases(): iterable
    {
        foreach (Operation::cases() as $op) {
            if ($op->retrySafe()) {
                foreach (self::transientErrors() as $name => [$error]) {
                    yield "$op->value after $name" => [$op->value, $error];
                }
            }
        }
    }

    /** @return iterable<string, array{string, \Closure(): (Response|\Throwable)}> */
    public static function notRetrySafeCases(): iterable
    {
        foreach (Operation::cases() as $op) {
            if (!$op->retrySafe() && $op !== Operation::Events) {
                foreach (self::transientErrors() as $name => [$error]) {
                    yield "$op->value after $name" => [$op->value, $error];
                }
            }
        }
    }

    public function testEveryOperationButTheStreamHasACallHere(): void
    {
        $expected = array_values(array_diff(
            array_map(static fn (Operation $op): string => $op->value, Operation::cases()),
            [Operation::Events->value],
        ));
        self::assertSame($expected, array_keys(Calls::all()));
    }

    public function testExactlyTheOperationsDocsClientsMdNamesAreRetrySafe(): void
    {
        // docs/clients.md, "Failover": reserve, start, heartbeat, commit, fail,
        // uncertain, resolve, unresolved, history, explain, status, touch,
        // top-up, set-premium, set-flags, set-limits; never cancel or create-chat.
        // void-grant: retry_safe in protocol/operation_type.hpp (a second void
        // answers the same grant).
        $documented = ['reserve', 'start', 'heartbeat', 'commit', 'fail', 'uncertain', 'resolve', 'unresolved',
            'history', 'explain', 'status', 'touch', 'top-up', 'void-grant', 'set-premium', 'set-flags',
            'set-limits'];
        $safe = array_map(
            static fn (Operation $op): string => $op->value,
            array_filter(Operation::cases(), static fn (Operation $op): bool => $op->retrySafe()),
        );
        sort($documented);
        sort($safe);
        self::assertSame($documented, $safe);
    }

    /**
     * @dataProvider retrySafeCases
     * @param \Closure(): (Response|\Throwable) $error
     */
    public function testARetrySafeCallIsRepeatedAsTheSameRequest(string $op, \Closure $error): void
    {
        [$call, $answer] = Calls::all()[$op];
        $transport = new FakeTransport([$error(), $error(), $answer]);

        $result = $call($this->client($transport));

        self::assertNotNull($result);
        self::assertCount(3, $transport->requests);
        self::assertEquals($transport->requests[0], $transport->requests[1], 'the first retry differs');
        self::assertEquals($transport->requests[0], $transport->requests[2], 'the second retry differs');
        self::assertCount(2, $this->slept);
    }

    /**
     * @dataProvider notRetrySafeCases
     * @param \Closure(): (Response|\Throwable) $error
     */
    public function testACallThatIsNotRetrySafeIsSentOnce(string $op, \Closure $error): void
    {
        [$call, $answer] = Calls::all()[$op];
        $transport = new FakeTransport([$error(), $answer]);

        try {
            $call($this->client($transport));
            self::fail("$op was repeated after a transient error");
        } catch (ChargeonceException $e) {
            self::assertContains($e->error, ['storage_unavailable', 'overloaded', 'request_timeout', 'connection']);
        }
        self::assertCount(1, $transport->requests);
        self::assertSame([], $this->slept);
    }

    /** @return iterable<string, array{Response, class-string<ChargeonceException>}> */
    public static function finalAnswers(): iterable
    {
        yield 'busy' => [FakeTransport::error(409, 'busy'), BusyException::class];
        yield 'not_found' => [FakeTransport::error(404, 'not_found'), NotFoundException::class];
        yield 'expired' => [FakeTransport::error(410, 'expired'), ExpiredException::class];
        yield 'internal (a bug: the same call would meet it again)' => [
            FakeTransport::error(500, 'internal'), InternalException::class,
        ];
        yield "a proxy's page" => [new Response(502, '<html>Bad Gateway</html>'), UnexpectedResponseException::class];
    }

    /**
     * @dataProvider finalAnswers
     * @param class-string<ChargeonceException> $class
     */
    public function testAnAnswerThatIsNotTransientIsNotRetried(Response $answer, string $class): void
    {
        $transport = new FakeTransport([$answer, FakeTransport::json(200, [])]);

        $this->expectException($class);
        try {
            $this->client($transport)->commit(42, 17);
        } finally {
            self::assertCount(1, $transport->requests);
            self::assertSame([], $this->slept);
        }
    }

    public function testTriesAreBoundedAndTheWaitsDoubleFromTheRetryAfterFloor(): void
    {
        $transport = new FakeTransport(array_fill(0, 6, new ConnectionException('refused (test)', 7)));

        try {
            $this->client($transport, maxAttempts: 6)->status(42);
            self::fail('no exception after 6 failed tries');
        } catch (ConnectionException $e) {
            self::assertSame('connection', $e->error);
            self::assertSame(0, $e->status);
        }
        self::assertCount(6, $transport->requests);
        self::assertEqualsWithDelta([0.1, 0.2, 0.4, 0.8, 1.6], $this->slept, 1e-9);
    }

    public function testAStorageOutageWaitsTheServersRetryAfter(): void
    {
        $transport = new FakeTransport([
            FakeTransport::error(503, 'storage_unavailable'),
            FakeTransport::error(503, 'storage_unavailable'),
            FakeTransport::error(503, 'storage_unavailable'),
        ]);

        $this->expectException(StorageUnavailableException::class);
        try {
            $this->client($transport, maxAttempts: 3)->touch(42);
        } finally {
            // Retry-After: 1 is above 0.1 and 0.2: the server asked for a second.
            self::assertSame([1.0, 1.0], $this->slept);
        }
    }

    public function testEveryTryCarriesTheSameIdsAndWorker(): void
    {
        [$commit, $receipt] = Calls::all()[Operation::Commit->value];
        [$topUp, $purchase] = Calls::all()[Operation::TopUp->value];
        $lost = static fn () => new ConnectionException('answer lost (test)', 52);
        $transport = new FakeTransport([$lost(), $receipt, $lost(), $purchase]);
        $client = $this->client($transport);

        $commit($client);
        $topUp($client);

        $bodies = array_map(
            static fn (Request $r): mixed => json_decode((string) $r->body, true),
            $transport->requests,
        );
        self::assertSame([
            ['units' => 1, 'worker' => 'queue-9-attempt-1'],
            ['units' => 1, 'worker' => 'queue-9-attempt-1'],
            ['credits' => 5, 'payment_id' => 'pay-1'],
            ['credits' => 5, 'payment_id' => 'pay-1'],
        ], $bodies);
        self::assertSame('wk-token', $transport->requests[1]->token);
        self::assertSame('ad-token', $transport->requests[3]->token);
    }

    public function testATopUpSendsExactlyTheTermsGivenOnEveryTry(): void
    {
        $receipt = FakeTransport::json(200, Fixtures::topUp([
            'grant_id' => 12, 'source' => 'promo', 'priority' => 10,
            'expires_at' => '2027-01-31T12:00:00.500000Z',
        ]));
        $lost = static fn () => new ConnectionException('answer lost (test)', 52);
        $transport = new FakeTransport([$lost(), $receipt, $receipt, $receipt]);
        $client = $this->client($transport);

        $topUp = $client->topUp(
            42,
            5,
            'pay-1',
            expiresAt: new \DateTimeImmutable('2027-01-31T12:00:00.5Z'),
            priority: 10,
            source: 'promo',
        );
        $client->topUp(42, 5, 'pay-2', expiresInMs: 86400000);
        $client->topUp(42, 5, 'pay-3');

        $bodies = array_map(
            static fn (Request $r): mixed => json_decode((string) $r->body, true),
            $transport->requests,
        );
        $terms = [
            'credits' => 5, 'payment_id' => 'pay-1', 'expires_at' => '2027-01-31T12:00:00.500000Z',
            'priority' => 10, 'source' => 'promo',
        ];
        self::assertSame([
            $terms,
            $terms,
            ['credits' => 5, 'payment_id' => 'pay-2', 'expires_in_ms' => 86400000],
            ['credits' => 5, 'payment_id' => 'pay-3'],
        ], $bodies);
        self::assertSame(
            ['POST', '/v1/chats/42/top-ups', 'ad-token'],
            [$transport->requests[0]->method, $transport->requests[0]->path, $transport->requests[0]->token],
        );
        self::assertSame([12, 'promo', 10], [$topUp->grant_id, $topUp->source, $topUp->priority]);
    }

    public function testAVoidSendsItsRouteAndIsRepeatedAsTheSameRequest(): void
    {
        $voided = FakeTransport::json(200, Fixtures::grant([
            'id' => 12, 'source' => 'promo', 'credits' => 50, 'left' => 0, 'priority' => 10,
            'payment_id' => 'promo-42-welcome',
        ]));
        $lost = static fn () => new ConnectionException('answer lost (test)', 52);
        $transport = new FakeTransport([$lost(), $voided, $lost(), $voided]);
        $client = $this->client($transport);

        $byId = $client->voidGrant(42, 12);
        $byPayment = $client->voidGrantByPayment(42, 'promo-42-welcome');

        $sent = array_map(
            static fn (Request $r): array => [$r->method, $r->path, $r->token, json_decode((string) $r->body, true)],
            $transport->requests,
        );
        $byIdRequest = ['POST', '/v1/chats/42/grants/12/void', 'ad-token', null];
        $byPaymentRequest = ['POST', '/v1/chats/42/grants/void', 'ad-token', ['payment_id' => 'promo-42-welcome']];
        self::assertSame([$byIdRequest, $byIdRequest, $byPaymentRequest, $byPaymentRequest], $sent);
        self::assertNull($transport->requests[0]->body, 'a void by id sends no body');
        foreach ([$byId, $byPayment] as $grant) {
            self::assertSame([12, 'promo', 50, 0, 10, 'promo-42-welcome'], [
                $grant->id, $grant->source, $grant->credits, $grant->left, $grant->priority, $grant->payment_id,
            ]);
            self::assertNotNull($grant->voided_at);
        }
    }

    public function testAVoidOfAGrantTheChatHasNotIsNotFound(): void
    {
        $transport = new FakeTransport([
            FakeTransport::error(404, 'not_found'),
            FakeTransport::error(404, 'not_found'),
        ]);
        $client = $this->client($transport);

        foreach ([
            static fn () => $client->voidGrant(42, 77),
            static fn () => $client->voidGrantByPayment(42, 'pay-unknown'),
        ] as $void) {
            try {
                $void();
                self::fail('no NotFoundException');
            } catch (NotFoundException $e) {
                self::assertSame([404, 'not_found'], [$e->status, $e->error]);
            }
        }
        self::assertCount(2, $transport->requests, 'not_found is not retried');
        self::assertSame([], $this->slept);
    }
}
