<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Support;

use Chargeonce\Exception\ConnectionException;
use Chargeonce\Http\EventSource;

/**
 * An event stream whose bytes come from the test, one chunk per read(); an
 * empty chunk is a read that waits its whole time for nothing. After the
 * last chunk it ends (or breaks, with `$breakAtEnd`).
 */
final class FakeEventSource implements EventSource
{
    public bool $closed = false;

    /** @param list<string> $chunks */
    public function __construct(private array $chunks, private readonly bool $breakAtEnd = false)
    {
    }

    public function read(float $seconds): string
    {
        if ($this->chunks === [] && $this->breakAtEnd) {
            throw new ConnectionException('the connection broke (test)');
        }
        $chunk = array_shift($this->chunks) ?? '';
        if ($chunk === '') {
            usleep((int) ($seconds * 1e6));
        }
        return $chunk;
    }

    public function ended(): bool
    {
        return $this->chunks === [] && !$this->breakAtEnd;
    }

    public function close(): void
    {
        $this->closed = true;
    }
}
