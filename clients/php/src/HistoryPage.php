<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/** One page of a chat's history, newest first. */
final readonly class HistoryPage
{
    /** @param list<HistoryEntry> $entries newest first */
    public function __construct(
        public int $chat,
        public array $entries,
        /** The `before` of the next page; null on the last. */
        public ?int $next_before,
        /** More than 1,000 reservations fell between this page's ledger rows: the oldest are left out. */
        public bool $truncated,
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        return new self(
            Json::int($x, 'chat'),
            array_map(HistoryEntry::fromArray(...), array_values(Json::array($x, 'entries'))),
            Json::intOrNull($x, 'next_before'),
            Json::bool($x, 'truncated'),
        );
    }
}
