<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Unit;

use Chargeonce\Client;
use Chargeonce\Exception\ConnectionException;
use Chargeonce\Http\Request;
use Chargeonce\RetryPolicy;
use Chargeonce\Tests\Support\FakeTransport;
use Chargeonce\Tests\Support\Fixtures;
use PHPUnit\Framework\TestCase;

/** A reserve without a request id gets an `auto:` one of the client's own, the same on its retries. */
final class AutoRequestIdTest extends TestCase
{
    private static function client(FakeTransport $transport): Client
    {
        $policy = new RetryPolicy(maxAttempts: 3, sleeper: static function (float $_): void {
        });
        return new Client('http://fake', 'gw-token', retry: $policy, transport: $transport);
    }

    private static function requestId(Request $request): string
    {
        return json_decode((string) $request->body, true)['request_id'];
    }

    public function testAnAutoIdIsAutoAnd128RandomBitsInHex(): void
    {
        self::assertMatchesRegularExpression('/^auto:[0-9a-f]{32}$/', Client::autoRequestId());
    }

    public function testAReserveWithoutARequestIdSendsTheSameAutoIdOnEveryTry(): void
    {
        $lost = static fn () => new ConnectionException('answer lost (test)', 52);
        $transport = new FakeTransport([$lost(), $lost(), FakeTransport::json(200, Fixtures::reservation())]);

        self::client($transport)->reserve(42, 'image');

        self::assertCount(3, $transport->requests);
        $ids = array_map(self::requestId(...), $transport->requests);
        self::assertMatchesRegularExpression('/^auto:[0-9a-f]{32}$/', $ids[0]);
        self::assertSame([$ids[0], $ids[0], $ids[0]], $ids);
    }

    public function testEachReserveCallGetsAnIdOfItsOwn(): void
    {
        $transport = new FakeTransport([
            FakeTransport::json(200, Fixtures::reservation()),
            FakeTransport::json(200, Fixtures::reservation()),
        ]);
        $client = self::client($transport);

        $client->reserve(42, 'image');
        $client->reserve(42, 'image');

        self::assertNotSame(self::requestId($transport->requests[0]), self::requestId($transport->requests[1]));
    }

    public function testTheCallersRequestIdIsSentAsItIs(): void
    {
        $transport = new FakeTransport([FakeTransport::json(200, Fixtures::reservation())]);

        self::client($transport)->reserve(42, 'image', 'msg-18-upscale', 3);

        self::assertSame(
            ['kind' => 'image', 'request_id' => 'msg-18-upscale', 'units' => 3],
            json_decode((string) $transport->requests[0]->body, true),
        );
        self::assertSame('POST', $transport->requests[0]->method);
        self::assertSame('/v1/chats/42/reservations', $transport->requests[0]->path);
    }
}
