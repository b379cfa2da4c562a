<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Support;

use Chargeonce\Client;
use Chargeonce\Http\Response;
use Chargeonce\Operation;

/** One call of every operation (but the event stream), with an answer it accepts. */
final class Calls
{
    /** @return array<string, array{\Closure(Client): mixed, Response}> by Operation value */
    public static function all(): array
    {
        $ok = static fn (array $body, int $status = 200): Response => FakeTransport::json($status, $body);
        return [
            Operation::Touch->value => [static fn (Client $c) => $c->touch(42), $ok(Fixtures::chat())],
            Operation::Reserve->value => [
                static fn (Client $c) => $c->reserve(42, 'image', 'msg-18-upscale', 2), $ok(Fixtures::reservation()),
            ],
            Operation::Cancel->value => [static fn (Client $c) => $c->cancel(42), $ok(Fixtures::reservation())],
            Operation::CancelReservation->value => [
                static fn (Client $c) => $c->cancelReservation(42, 17), $ok(Fixtures::reservation()),
            ],
            Operation::Status->value => [static fn (Client $c) => $c->status(42), $ok(Fixtures::chat())],
            Operation::Start->value => [
                static fn (Client $c) => $c->start(42, 17, 'queue-9-attempt-1'), $ok(Fixtures::reservation()),
            ],
            Operation::Heartbeat->value => [
                static fn (Client $c) => $c->heartbeat(42, 17, 'queue-9-attempt-1'), $ok(Fixtures::reservation()),
            ],
            Operation::Commit->value => [
                static fn (Client $c) => $c->commit(42, 17, 1, 'queue-9-attempt-1'), $ok(Fixtures::receipt()),
            ],
            Operation::Fail->value => [
                static fn (Client $c) => $c->fail(42, 17, 'queue-9-attempt-1'), $ok(Fixtures::reservation()),
            ],
            Operation::Uncertain->value => [
                static fn (Client $c) => $c->uncertain(42, 17, 'prov-1', 'queue-9-attempt-1'),
                $ok(Fixtures::reservation()),
            ],
            Operation::Resolve->value => [
                static fn (Client $c) => $c->resolve(42, 17, 'succeeded', 1), $ok(Fixtures::resolution()),
            ],
            Operation::Unresolved->value => [
                static fn (Client $c) => $c->unresolved(5, 10), $ok(Fixtures::unresolved()),
            ],
            Operation::CreateChat->value => [
                static fn (Client $c) => $c->createChat(42, dailyImages: 1, balance: 3), $ok(Fixtures::chat(), 201),
            ],
            Operation::TopUp->value => [static fn (Client $c) => $c->topUp(42, 5, 'pay-1'), $ok(Fixtures::topUp())],
            Operation::VoidGrant->value => [static fn (Client $c) => $c->voidGrant(42, 9), $ok(Fixtures::grant())],
            Operation::SetPremium->value => [
                static fn (Client $c) => $c->setPremium(42, '2099-01-01T00:00:00Z'), $ok(Fixtures::chat()),
            ],
            Operation::SetFlags->value => [
                static fn (Client $c) => $c->setFlags(42, blocked: true), $ok(Fixtures::chat()),
            ],
            Operation::SetLimits->value => [static fn (Client $c) => $c->setLimits(42, 2), $ok(Fixtures::chat())],
            Operation::History->value => [static fn (Client $c) => $c->history(42, 10), $ok(Fixtures::history())],
            Operation::Explain->value => [static fn (Client $c) => $c->explain(42), $ok(Fixtures::explanation())],
            Operation::Healthz->value => [static fn (Client $c) => $c->healthz(), $ok(['status' => 'ok'])],
            Operation::Readyz->value => [static fn (Client $c) => $c->readyz(), $ok(['status' => 'ready'])],
            Operation::Metrics->value => [
                static fn (Client $c) => $c->metrics(), new Response(200, "chargeonce_up 1\n"),
            ],
        ];
    }
}
