<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/** The support view of a chat: its status, its plan and why, its refill and deadlines, its recent history. */
final readonly class Explanation
{
    /**
     * @param array<int, ?\DateTimeImmutable> $deadlines each active job's deadline, by reservation id
     * @param list<HistoryEntry> $history the last 10 entries, newest first
     */
    public function __construct(
        public int $chat,
        public ChatStatus $status,
        public string $plan,
        /** "premium until …", "premium ended …" or "never premium". */
        public string $plan_reason,
        public ?\DateTimeImmutable $window_started_at,
        /** When the open window may refill; null: none is open, the next activity opens one. */
        public ?\DateTimeImmutable $next_refill_at,
        public int $refill_interval_ms,
        public array $deadlines,
        public array $history,
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        $byId = Json::array($x, 'deadlines');
        $deadlines = [];
        foreach (array_keys($byId) as $id) {
            $deadlines[(int) $id] = Json::timeOrNull($byId, (string) $id);
        }
        return new self(
            Json::int($x, 'chat'),
            ChatStatus::fromArray(Json::array($x, 'status')),
            Json::string($x, 'plan'),
            Json::string($x, 'plan_reason'),
            Json::timeOrNull($x, 'window_started_at'),
            Json::timeOrNull($x, 'next_refill_at'),
            Json::int($x, 'refill_interval_ms'),
            $deadlines,
            array_map(HistoryEntry::fromArray(...), array_values(Json::array($x, 'history'))),
        );
    }
}
