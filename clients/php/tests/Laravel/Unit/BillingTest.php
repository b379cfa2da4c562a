<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Laravel\Unit;

use Chargeonce\Client;
use Chargeonce\Exception\BusyException;
use Chargeonce\Laravel\Billing;
use Chargeonce\Tests\Support\FakeTransport;
use Chargeonce\Tests\Support\Fixtures;
use PHPUnit\Framework\TestCase;

/** The facade's reserve: the queue the plan chose, as the application names it; errors as the client's. */
final class BillingTest extends TestCase
{
    private static function billing(FakeTransport $server): Billing
    {
        return new Billing(new Client('http://fake', gatewayToken: 'gw-token', transport: $server),
            ['image_generation_priority' => 'images-fast']);
    }

    public function testTheReservationNamesTheApplicationsQueue(): void
    {
        $server = new FakeTransport([
            FakeTransport::json(200, Fixtures::reservation(['queue' => 'image_generation_priority'])),
            FakeTransport::json(200, Fixtures::reservation()),
        ]);
        $billing = self::billing($server);
        $r = $billing->reserve(42, 'image', requestId: 'msg-18-upscale');
        self::assertSame('images-fast', $r->queue);
        self::assertSame(17, $r->id);
        self::assertSame('msg-18-upscale', json_decode((string) $server->requests[0]->body, true)['request_id']);
        self::assertSame('image_generation', $billing->reserve(42, 'image', 'msg-19-upscale')->queue, 'not mapped');
    }

    public function testBusyIsTheClientsException(): void
    {
        $this->expectException(BusyException::class);
        self::billing(new FakeTransport([FakeTransport::error(409, 'busy')]))->reserve(42, 'image', 'r');
    }

    public function testOtherMethodsArePassedOn(): void
    {
        $server = new FakeTransport([FakeTransport::json(200, Fixtures::chat())]);
        self::assertSame(42, self::billing($server)->status(42)->chat);
        self::assertSame('GET /v1/chats/42', $server->requests[0]->method . ' ' . $server->requests[0]->path);
    }
}
