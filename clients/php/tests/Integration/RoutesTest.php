<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Integration;

use Chargeonce\ChatStatus;
use Chargeonce\Exception\NotReadyException;
use Chargeonce\HistoryEntry;
use Chargeonce\Reservation;

/** Every route of docs/http.md against a real server, each answer read into its typed result. */
final class RoutesTest extends IntegrationTestCase
{
    public function testProbes(): void
    {
        $client = $this->client();

        self::assertSame('ok', $client->healthz());
        // Ready once the actors and Postgres answer: waited for, not asked once.
        $ready = $this->waitFor('readyz', static function () use ($client): ?string {
            try {
                return $client->readyz();
            } catch (NotReadyException) {
                return null;
            }
        });
        self::assertSame('ready', $ready);
        self::assertMatchesRegularExpression('/^chargeonce_build_info\{/m', $client->metrics());
    }

    public function testRequestsShareOneKeptAliveConnection(): void
    {
        $transport = $this->curl();
        $client = $this->client($transport);
        $chat = self::newChat();
        $client->touch($chat);
        $handle = (fn (): ?\CurlHandle => $this->handle)->call($transport); // the test looks inside

        // Counted, not required of every request: the server closes a
        // connection idle for http-timeout (5 s), a stalled machine may pass it.
        $reused = 0;
        for ($i = 0; $i < 10; ++$i) {
            $client->status($chat);
            $reused += curl_getinfo($handle, CURLINFO_NUM_CONNECTS) === 0 ? 1 : 0;
        }
        fwrite(STDERR, "\nphp: $reused of 10 requests went over the open connection\n");
        self::assertGreaterThan(0, $reused);
    }

    public function testAdminRoutes(): void
    {
        $client = $this->client();
        $chat = self::newChat();

        $created = $client->createChat($chat, dailyMessages: 2, dailyImages: 1, balance: 2);
        self::assertInstanceOf(ChatStatus::class, $created);
        self::assertSame([$chat, 2, 1, 2, 'free', 0], [
            $created->chat, $created->daily_messages, $created->daily_images, $created->balance, $created->plan,
            $created->window,
        ]);
        self::assertNull($created->reservation);

        $topUp = $client->topUp($chat, 5, "pay-$chat");
        self::assertSame([$chat, "pay-$chat", 5], [$topUp->chat, $topUp->payment_id, $topUp->credits]);
        self::assertSame(7, $client->status($chat)->balance);

        $premium = $client->setPremium($chat, new \DateTimeImmutable('+1 year'));
        self::assertSame(['premium', true], [$premium->plan, $premium->premium]);
        self::assertNotNull($premium->premium_until);
        self::assertSame('free', $client->setPremium($chat, '2001-01-01T00:00:00Z')->plan);

        $flags = $client->setFlags($chat, started: true);
        self::assertSame([true, false, false], [$flags->started, $flags->blocked, $flags->banned]);

        self::assertSame(2, $client->setLimits($chat, 2)->max_active_jobs);
        self::assertSame(1, $client->setLimits($chat, null)->max_active_jobs, "back to the free plan's limit");

        $history = $client->history($chat, limit: 1);
        self::assertSame($chat, $history->chat);
        self::assertCount(1, $history->entries);
        self::assertNotNull($history->next_before);
        $older = $client->history($chat, before: $history->next_before);
        $entries = [...$history->entries, ...$older->entries];
        $causes = array_map(static fn (HistoryEntry $e): string => $e->cause, $entries);
        self::assertContains('top_up', $causes);
        self::assertSame('admin', end($causes));
        $topUpRow = $entries[array_search('top_up', $causes, true)];
        self::assertSame(["pay-$chat", 5], [$topUpRow->payment_id, $topUpRow->change['balance'] ?? null]);

        $why = $client->explain($chat);
        self::assertSame([$chat, 'free', 7], [$why->chat, $why->plan, $why->status->balance]);
        self::assertStringStartsWith('premium ended', $why->plan_reason);
        self::assertSame(86_400_000, $why->refill_interval_ms);
        self::assertNotEmpty($why->history);
    }

    public function testGatewayAndWorkerRoutes(): void
    {
        $client = $this->client();
        $fresh = self::newChat();
        $touched = $client->touch($fresh);
        self::assertSame([$fresh, 'free', false], [$touched->chat, $touched->plan, $touched->started]);
        self::assertNotNull($touched->window_started_at);

        $chat = self::newChat();
        $client->createChat($chat, dailyImages: 1, balance: 1);
        $job = $client->reserve($chat, 'image', 'job-1');
        self::assertInstanceOf(Reservation::class, $job);
        self::assertSame(['queued', 'image', 'job-1', 1, 1, 0], [
            $job->status, $job->kind, $job->request_id, $job->units, $job->held->daily_images, $job->window,
        ]);
        self::assertNotSame('', $job->queue);
        self::assertSame($job->id, $client->status($chat)->reservation?->id);

        $started = $client->start($chat, $job->id, "worker-$chat-1");
        self::assertSame('in_progress', $started->status);
        $beat = $client->heartbeat($chat, $job->id, "worker-$chat-1");
        self::assertNotNull($beat->lease_expires_at);
        self::assertFalse($beat->cancel_requested);
        $receipt = $client->commit($chat, $job->id, worker: "worker-$chat-1");
        self::assertSame([$job->id, $chat, 1, 1, 0], [
            $receipt->reservation, $receipt->chat, $receipt->charged->daily_images, $receipt->units, $receipt->window,
        ]);

        // The balance's one credit, held and let go four ways.
        $second = $client->reserve($chat, 'image', 'job-2');
        self::assertSame(1, $second->held->balance);
        self::assertSame($second->id, $client->cancel($chat)->id);
        $third = $client->reserve($chat, 'image', 'job-3');
        self::assertSame($third->id, $client->cancel($chat, 'job-3')->id);
        $fourth = $client->reserve($chat, 'image', 'job-4');
        self::assertSame($fourth->id, $client->cancelReservation($chat, $fourth->id)->id);
        $fifth = $client->reserve($chat, 'image', 'job-5');
        $client->start($chat, $fifth->id);
        self::assertSame($fifth->id, $client->fail($chat, $fifth->id)->id);

        $after = $client->status($chat);
        self::assertSame(
            [0, 1, null, []],
            [$after->daily_images, $after->balance, $after->reservation, $after->reservations],
        );
        $again = $client->reserve($chat, 'image', 'job-2');
        self::assertSame([$second->id, 'cancelled'], [$again->id, $again->status], 'a retried reserve of an ended job');
    }

    public function testUncertainResolveAndUnresolved(): void
    {
        $client = $this->client();
        $chat = self::newChat();
        $client->createChat($chat, balance: 2);
        $job = $client->reserve($chat, 'image', 'u-1');
        $client->start($chat, $job->id, 'w-u');

        $unknown = $client->uncertain($chat, $job->id, "prov-$chat", 'w-u');
        self::assertSame(
            ['outcome_unknown', -1, "prov-$chat"],
            [$unknown->status, $unknown->slot, $unknown->provider_ref],
        );
        self::assertNotNull($unknown->uncertain_at);

        $page = $client->unresolved($job->id - 1, 1000);
        $listed = array_values(array_filter(
            $page->reservations,
            static fn (Reservation $r): bool => $r->id === $job->id,
        ));
        self::assertCount(1, $listed);
        self::assertSame("prov-$chat", $listed[0]->provider_ref);
        self::assertNotNull($page->next_after);

        $resolution = $client->resolve($chat, $job->id, 'succeeded');
        self::assertSame([$job->id, 'succeeded', 1, 1, "prov-$chat", 0], [
            $resolution->reservation, $resolution->outcome, $resolution->charged->balance, $resolution->units,
            $resolution->provider_ref, $resolution->window,
        ]);
        self::assertEquals($resolution, $client->resolve($chat, $job->id, 'succeeded'), 'a repeat answers the first');
        self::assertSame(1, $client->status($chat)->balance);
    }
}
