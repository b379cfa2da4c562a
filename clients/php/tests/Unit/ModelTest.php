<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Unit;

use Chargeonce\ChatStatus;
use Chargeonce\Event;
use Chargeonce\Exception\UnexpectedResponseException;
use Chargeonce\Explanation;
use Chargeonce\Grant;
use Chargeonce\HistoryPage;
use Chargeonce\Pockets;
use Chargeonce\Receipt;
use Chargeonce\Reservation;
use Chargeonce\Resolution;
use Chargeonce\Tests\Support\Fixtures;
use Chargeonce\TopUp;
use Chargeonce\UnresolvedPage;
use PHPUnit\Framework\TestCase;

/** The typed results keep the JSON's field names and types. */
final class ModelTest extends TestCase
{
    public function testAReservationKeepsEveryField(): void
    {
        $r = Reservation::fromArray(Fixtures::reservation());

        self::assertSame(17, $r->id);
        self::assertSame('image_generation', $r->queue);
        self::assertSame(1, $r->held->daily_images);
        self::assertSame('msg-18-upscale', $r->request_id);
        self::assertSame('2026-12-07T05:13:23.039685+00:00', $r->created_at->format('Y-m-d\TH:i:s.uP'));
        self::assertNull($r->lease_expires_at);
        self::assertSame(3, $r->window);
        self::assertFalse($r->cancel_requested);
        self::assertNull($r->provider_ref);
        self::assertTrue($r->isActive());
    }

    public function testReceiptResolutionAndTopUpCarryTheirWindowAndAmounts(): void
    {
        $receipt = Receipt::fromArray(Fixtures::receipt());
        $resolution = Resolution::fromArray(Fixtures::resolution());
        $topUp = TopUp::fromArray(Fixtures::topUp());

        self::assertSame([1, 3], [$receipt->charged->daily_images, $receipt->window]);
        self::assertSame(
            ['succeeded', 1, 3],
            [$resolution->outcome, $resolution->charged->balance, $resolution->window],
        );
        self::assertSame(['pay-1', 5], [$topUp->payment_id, $topUp->credits]);
    }

    public function testATopUpReadsItsGrant(): void
    {
        $topUp = TopUp::fromArray(Fixtures::topUp([
            'grant_id' => 12, 'source' => 'promo', 'priority' => 10,
            'expires_at' => '2027-01-31T12:00:00.500000Z', 'expires_in_ms' => 86400000,
        ]));

        self::assertSame([12, 'promo', 10, 86400000], [
            $topUp->grant_id, $topUp->source, $topUp->priority, $topUp->expires_in_ms,
        ]);
        self::assertSame('2027-01-31T12:00:00.500000+00:00', $topUp->expires_at?->format('Y-m-d\TH:i:s.uP'));

        $never = TopUp::fromArray(Fixtures::topUp());
        self::assertSame([9, 'purchase', 100, null, null], [
            $never->grant_id, $never->source, $never->priority, $never->expires_at, $never->expires_in_ms,
        ]);
    }

    public function testATopUpOfAServerBeforeGrantsGetsTheDefaults(): void
    {
        $topUp = TopUp::fromArray(Fixtures::topUpBeforeGrants());

        self::assertSame(['pay-1', 5], [$topUp->payment_id, $topUp->credits]);
        self::assertSame([null, 'purchase', 100, null, null], [
            $topUp->grant_id, $topUp->source, $topUp->priority, $topUp->expires_at, $topUp->expires_in_ms,
        ]);
    }

    public function testATopUpWithAGrantFieldOfAnotherTypeIsRefused(): void
    {
        $this->expectException(UnexpectedResponseException::class);
        $this->expectExceptionMessage('field "priority" is not an integer');
        TopUp::fromArray(Fixtures::topUp(['priority' => '10']));
    }

    public function testAGrantKeepsEveryField(): void
    {
        $g = Grant::fromArray(Fixtures::grant([
            'id' => 12, 'source' => 'promo', 'credits' => 50, 'left' => 20, 'held' => 3, 'priority' => 10,
            'expires_at' => '2027-01-31T12:00:00.500000Z', 'payment_id' => 'promo-42-welcome',
            'expired_at' => null, 'voided_at' => null,
        ]));

        self::assertSame([12, 42, 'promo', 50, 20, 3, 10, 'promo-42-welcome'], [
            $g->id, $g->chat, $g->source, $g->credits, $g->left, $g->held, $g->priority, $g->payment_id,
        ]);
        self::assertSame('2027-01-31T12:00:00.500000+00:00', $g->expires_at?->format('Y-m-d\TH:i:s.uP'));
        self::assertSame('2026-12-07T05:15:00.000000+00:00', $g->created_at->format('Y-m-d\TH:i:s.uP'));
        self::assertSame([null, null], [$g->expired_at, $g->voided_at]);

        $voided = Grant::fromArray(Fixtures::grant([
            'payment_id' => null, 'expired_at' => '2026-12-08T00:00:00.000000Z',
        ]));
        self::assertNull($voided->payment_id, 'an opening balance');
        self::assertNull($voided->expires_at, 'never');
        self::assertSame('2026-12-08T00:00:00.000000+00:00', $voided->expired_at?->format('Y-m-d\TH:i:s.uP'));
        self::assertSame('2026-12-08T09:30:00.250000+00:00', $voided->voided_at?->format('Y-m-d\TH:i:s.uP'));
    }

    public function testAGrantWithAFieldOfAnotherTypeIsRefused(): void
    {
        $this->expectException(UnexpectedResponseException::class);
        $this->expectExceptionMessage('field "left" is not an integer');
        Grant::fromArray(Fixtures::grant(['left' => '0']));
    }

    public function testAChatStatusHoldsItsReservations(): void
    {
        $chat = ChatStatus::fromArray(Fixtures::chat());

        self::assertSame(42, $chat->chat);
        self::assertSame(3, $chat->window);
        self::assertSame(17, $chat->reservation?->id);
        self::assertCount(1, $chat->reservations);
        self::assertSame(['balance' => 3, 'daily_images' => 1, 'daily_messages' => 0], $chat->pockets);
        self::assertSame(3, $chat->available->balance);
        self::assertSame([], $chat->grants); // a server before grants sends none
        self::assertSame(0, $chat->balance_low_threshold, 'a server before the threshold: 0, off');
        $withThreshold = ChatStatus::fromArray(['balance_low_threshold' => 50] + Fixtures::chat());
        self::assertSame(50, $withThreshold->balance_low_threshold);
    }

    public function testAChatStatusListsItsGrantsInTheOrderSent(): void
    {
        $promo = Fixtures::grant(['id' => 12, 'source' => 'promo', 'left' => 2, 'held' => 1, 'priority' => 10,
            'voided_at' => null, 'expires_at' => '2026-12-09T00:00:00Z', 'expired' => true, 'voided' => false]);
        $plain = Fixtures::grant(['id' => 9, 'left' => 5, 'voided_at' => null, 'expired' => false, 'voided' => false]);
        $chat = ChatStatus::fromArray(Fixtures::chat() + ['grants' => [$promo, $plain]]);

        self::assertSame(
            [[12, 'promo', 2, 1, true, false], [9, 'purchase', 5, 0, false, false]],
            array_map(static fn (Grant $g) => [$g->id, $g->source, $g->left, $g->held, $g->expired, $g->voided], $chat->grants),
        );
    }

    public function testGrantAndBalanceEventsReadTheirFields(): void
    {
        $expired = Event::fromFrame('credits_expired', [
            'event' => 'credits_expired', 'chat' => 1, 'grant' => 7, 'credits' => 5, 'event_id' => 9,
        ], '9');
        self::assertSame([7, 5, null], [$expired->grant, $expired->credits, $expired->expires_at]);
        $expiring = Event::fromFrame('credits_expiring', [
            'event' => 'credits_expiring', 'chat' => 1, 'grant' => 7, 'credits' => 5,
            'expires_at' => '2027-01-31T12:00:00Z', 'event_id' => 10,
        ], '10');
        self::assertSame([7, 5], [$expiring->grant, $expiring->credits]);
        self::assertSame('2027-01-31T12:00:00+00:00', $expiring->expires_at?->format(DATE_ATOM));
        $low = Event::fromFrame('balance_low', [
            'event' => 'balance_low', 'chat' => 1, 'available' => 4, 'threshold' => 5, 'cause' => 'reserve',
            'reservation' => 3, 'event_id' => 11,
        ], '11');
        self::assertSame([4, 5, 'reserve', 3, 11], [$low->available, $low->threshold, $low->cause,
            $low->reservation, $low->event_id]);
    }

    public function testAnEventThisVersionDoesNotKnowComesAsItIs(): void
    {
        $e = Event::fromFrame('from_the_future', ['event' => 'from_the_future', 'chat' => 1, 'event_id' => 12,
            'shape' => [1]], '12');
        self::assertSame(['from_the_future', 12, [1], false], [$e->event, $e->event_id, $e->data['shape'],
            $e->endsStream()]);
    }

    public function testHistoryExplanationAndUnresolvedPages(): void
    {
        $page = HistoryPage::fromArray(Fixtures::history());
        $why = Explanation::fromArray(Fixtures::explanation());
        $open = UnresolvedPage::fromArray(Fixtures::unresolved());

        self::assertSame(['commit', 'admin'], array_map(static fn ($e) => $e->cause, $page->entries));
        self::assertSame(['daily_images' => -1], $page->entries[0]->change);
        self::assertSame(3, $page->entries[0]->window);
        self::assertSame([12 => 2, 9 => 1], $page->entries[0]->grants);
        self::assertSame([], $page->entries[1]->grants); // a server before grants sends none
        self::assertNull($page->entries[1]->window);
        self::assertNull($page->entries[1]->after);
        self::assertNull($page->next_before);
        self::assertSame([17], array_keys($why->deadlines));
        self::assertSame('never premium', $why->plan_reason);
        self::assertSame('prov-1', $open->reservations[0]->provider_ref);
        self::assertSame(17, $open->next_after);
    }

    public function testPocketsOfTheCatalogAreKeptByName(): void
    {
        $p = Pockets::fromArray(['balance' => 2, 'daily_voice' => 7]);

        self::assertSame([0, 0, 2], [$p->daily_messages, $p->daily_images, $p->balance]);
        self::assertSame([7, 0], [$p->get('daily_voice'), $p->get('nope')]);
    }

    public function testAMissingFieldIsNamed(): void
    {
        $json = Fixtures::reservation();
        unset($json['window']);

        $this->expectException(UnexpectedResponseException::class);
        $this->expectExceptionMessage('field "window" is not an integer');
        Reservation::fromArray($json);
    }
}
