<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * One line of a chat's history: a ledger row (cause commit, top_up, refill
 * or admin) or a reservation that did not end in a commit (cause
 * reservation). Fields a cause does not have are null (docs/clients.md).
 */
final readonly class HistoryEntry
{
    /** @param ?array<string, int> $change ledger rows: the signed change of each pocket it changed */
    public function __construct(
        public \DateTimeImmutable $at,
        /** commit, top_up, refill, admin or reservation. */
        public string $cause,
        /** The ledger row's kind (window, create_chat, …), a release's reason, or uncertain/succeeded/failed. */
        public string $detail,
        /** A reservation: its hold's window; a commit: the window that paid; a refill: the one it opened. */
        public ?int $window,
        public ?int $ledger_id,
        public ?array $change,
        /** Ledger rows: the pockets after the change (null for rows older than that record). */
        public ?Pockets $after,
        public ?int $reservation,
        public ?string $kind,
        public ?string $request_id,
        public ?string $payment_id,
        public ?int $units,
        public ?Pockets $released,
        public ?string $status,
        public ?Pockets $held,
        public ?\DateTimeImmutable $created_at,
        /** An active reservation: when the sweep releases it. */
        public ?\DateTimeImmutable $deadline,
        public ?bool $cancel_requested,
        /**
         * The balance's grants it concerns, grant id => credits, in spending order: what a
         * commit charged each, the grant a top-up made or an expire/void ended, what an
         * active hold holds of each ([] for a server before grants).
         *
         * @var array<int, int>
         */
        public array $grants = [],
    ) {
    }

    /** @param array<mixed> $x */
    public static function fromArray(array $x): self
    {
        $pockets = static function (string $key) use ($x): ?Pockets {
            $v = Json::arrayOrNull($x, $key);
            return $v === null ? null : Pockets::fromArray($v);
        };
        return new self(
            Json::time($x, 'at'),
            Json::string($x, 'cause'),
            Json::string($x, 'detail'),
            Json::intOrNull($x, 'window'),
            Json::intOrNull($x, 'ledger_id'),
            isset($x['change']) ? Json::amounts($x, 'change') : null,
            $pockets('after'),
            Json::intOrNull($x, 'reservation'),
            Json::stringOrNull($x, 'kind'),
            Json::stringOrNull($x, 'request_id'),
            Json::stringOrNull($x, 'payment_id'),
            Json::intOrNull($x, 'units'),
            $pockets('released'),
            Json::stringOrNull($x, 'status'),
            $pockets('held'),
            Json::timeOrNull($x, 'created_at'),
            Json::timeOrNull($x, 'deadline'),
            Json::boolOrNull($x, 'cancel_requested'),
            self::grants(Json::arrayOrNull($x, 'grants') ?? []),
        );
    }

    /**
     * @param array<mixed> $parts
     * @return array<int, int>
     */
    private static function grants(array $parts): array
    {
        $out = [];
        foreach ($parts as $part) {
            $part = Json::array(['grants' => $part], 'grants');
            $out[Json::int($part, 'grant')] = Json::int($part, 'credits');
        }
        return $out;
    }
}
