<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Http;

/** One HTTP answer: status, headers (names in lower case) and body. */
final readonly class Response
{
    /** @param array<string, string> $headers by lower-case name */
    public function __construct(
        public int $status,
        public string $body,
        public array $headers = [],
    ) {
    }

    /** The header's value, or null; `$name` in any case. */
    public function header(string $name): ?string
    {
        return $this->headers[strtolower($name)] ?? null;
    }
}
