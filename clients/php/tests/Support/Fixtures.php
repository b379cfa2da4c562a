<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Support;

/** Answers as chargeonce-server writes them (copied from a real server's). */
final class Fixtures
{
    /** @return array<mixed> */
    public static function reservation(array $with = []): array
    {
        return $with + [
            'id' => 17, 'chat' => 42, 'kind' => 'image', 'status' => 'queued', 'queue' => 'image_generation',
            'held' => ['balance' => 0, 'daily_images' => 1, 'daily_messages' => 0],
            'request_id' => 'msg-18-upscale', 'created_at' => '2026-12-07T05:13:23.039685Z',
            'lease_expires_at' => null, 'slot' => 0, 'ended_at' => null, 'units' => 1,
            'cancel_requested' => false, 'window' => 3,
        ];
    }

    /** @return array<mixed> */
    public static function receipt(): array
    {
        return [
            'reservation' => 17, 'chat' => 42, 'kind' => 'image',
            'charged' => ['balance' => 0, 'daily_images' => 1, 'daily_messages' => 0],
            'committed_at' => '2026-12-07T05:13:24.053006Z', 'units' => 1,
            'released' => ['balance' => 0, 'daily_images' => 0, 'daily_messages' => 0], 'window' => 3,
        ];
    }

    /** @return array<mixed> */
    public static function resolution(): array
    {
        return [
            'reservation' => 17, 'chat' => 42, 'kind' => 'image', 'outcome' => 'succeeded',
            'charged' => ['balance' => 1, 'daily_images' => 0, 'daily_messages' => 0],
            'released' => ['balance' => 0, 'daily_images' => 0, 'daily_messages' => 0],
            'units' => 1, 'resolved_at' => '2026-12-07T05:14:00.000001Z', 'provider_ref' => 'prov-1', 'window' => 3,
        ];
    }

    /** @return array<mixed> */
    public static function chat(): array
    {
        $pockets = ['balance' => 3, 'daily_images' => 1, 'daily_messages' => 0];
        return $pockets + [
            'chat' => 42, 'pockets' => $pockets, 'plan' => 'free', 'premium' => false, 'premium_until' => null,
            'started' => false, 'blocked' => false, 'banned' => false, 'window' => 3,
            'window_started_at' => '2026-12-07T05:10:44.331559Z', 'last_activity_at' => '2026-12-07T05:10:44.331559Z',
            'reservation' => self::reservation(), 'max_active_jobs' => 1,
            'held' => ['balance' => 0, 'daily_images' => 1, 'daily_messages' => 0],
            'available' => ['balance' => 3, 'daily_images' => 0, 'daily_messages' => 0],
            'reservations' => [self::reservation()],
        ];
    }

    /** @return array<mixed> */
    public static function topUp(array $with = []): array
    {
        return $with + [
            'chat' => 42, 'payment_id' => 'pay-1', 'credits' => 5, 'purchased_at' => '2026-12-07T05:15:00.000000Z',
            'grant_id' => 9, 'source' => 'purchase', 'priority' => 100, 'expires_at' => null, 'expires_in_ms' => null,
        ];
    }

    /** @return array<mixed> a grant after its void */
    public static function grant(array $with = []): array
    {
        return $with + [
            'id' => 9, 'chat' => 42, 'source' => 'purchase', 'credits' => 5, 'left' => 0, 'held' => 0,
            'priority' => 100, 'expires_at' => null, 'payment_id' => 'pay-1',
            'created_at' => '2026-12-07T05:15:00.000000Z', 'expired_at' => null,
            'voided_at' => '2026-12-08T09:30:00.250000Z',
        ];
    }

    /** @return array<mixed> a server's before grants (0.2): no grant fields */
    public static function topUpBeforeGrants(): array
    {
        return ['chat' => 42, 'payment_id' => 'pay-1', 'credits' => 5, 'purchased_at' => '2026-12-07T05:15:00.000000Z'];
    }

    /** @return array<mixed> */
    public static function history(): array
    {
        return [
            'chat' => 42,
            'entries' => [
                [
                    'at' => '2026-12-07T05:13:24.053006Z', 'cause' => 'commit', 'detail' => '', 'window' => 3,
                    'grants' => [['grant' => 12, 'credits' => 2], ['grant' => 9, 'credits' => 1]],
                    'ledger_id' => 2, 'change' => ['daily_images' => -1],
                    'after' => ['balance' => 3, 'daily_images' => 0, 'daily_messages' => 0],
                    'reservation' => 17, 'kind' => 'image', 'request_id' => 'msg-18-upscale', 'units' => 1,
                    'released' => ['balance' => 0, 'daily_images' => 0, 'daily_messages' => 0],
                ],
                [
                    'at' => '2026-12-07T05:13:23.023991Z', 'cause' => 'admin', 'detail' => 'create_chat',
                    'ledger_id' => 1, 'change' => ['balance' => 3, 'daily_images' => 1], 'after' => null,
                ],
            ],
            'next_before' => null,
            'truncated' => false,
        ];
    }

    /** @return array<mixed> */
    public static function explanation(): array
    {
        return [
            'chat' => 42, 'status' => self::chat(), 'plan' => 'free', 'plan_reason' => 'never premium',
            'window_started_at' => '2026-12-07T05:10:44.331559Z', 'next_refill_at' => '2026-12-08T05:10:44.331559Z',
            'refill_interval_ms' => 86400000, 'deadlines' => ['17' => '2026-12-07T05:16:23.039685Z'],
            'history' => self::history()['entries'],
        ];
    }

    /** @return array<mixed> */
    public static function unresolved(): array
    {
        $job = self::reservation([
            'status' => 'outcome_unknown', 'slot' => -1, 'provider_ref' => 'prov-1',
            'uncertain_at' => '2026-12-07T05:13:30.000000Z',
        ]);
        return ['reservations' => [$job], 'next_after' => 17];
    }
}
