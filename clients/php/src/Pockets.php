<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * Amounts by pocket: the three built-in pockets always (0 when the server's
 * catalog lacks them), and in $all every pocket the server named, the
 * catalog's own ones (e.g. "daily_voice") included.
 */
final readonly class Pockets
{
    /** @param array<string, int> $all every pocket the answer named, by name */
    public function __construct(
        public int $daily_messages,
        public int $daily_images,
        public int $balance,
        public array $all,
    ) {
    }

    /** @param array<mixed> $x e.g. {"daily_messages": 0, "daily_images": 1, "balance": 0} */
    public static function fromArray(array $x): self
    {
        $all = Json::amounts(['pockets' => $x], 'pockets');
        return new self(
            $all['daily_messages'] ?? 0,
            $all['daily_images'] ?? 0,
            $all['balance'] ?? 0,
            $all,
        );
    }

    /** The amount of pocket `$name`; 0 for one the answer did not name. */
    public function get(string $name): int
    {
        return $this->all[$name] ?? 0;
    }
}
