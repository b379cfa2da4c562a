<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\TransientException;

/**
 * How often and how long the client waits before trying a retry-safe
 * operation again after a transient error (no answer, storage_unavailable,
 * overloaded, request_timeout): at most $maxAttempts tries in all, the n-th
 * retry after $baseDelay × 2^(n-1) seconds (at most $maxDelay), less up to
 * $jitter of it at random so that clients that failed together do not
 * retry together, and never before the server's Retry-After. The sleeper
 * and the random source are injectable so that tests wait for nothing.
 */
final class RetryPolicy
{
    /** @var \Closure(float): void */
    private \Closure $sleeper;
    /** @var \Closure(): float */
    private \Closure $random;

    /**
     * @param int $maxAttempts tries in all, the first included (1: never retry)
     * @param ?callable(float): void $sleeper waits that many seconds; default usleep
     * @param ?callable(): float $random a number in [0, 1]; default mt_rand
     */
    public function __construct(
        public readonly int $maxAttempts = 5,
        public readonly float $baseDelay = 0.1,
        public readonly float $maxDelay = 2.0,
        public readonly float $jitter = 0.5,
        ?callable $sleeper = null,
        ?callable $random = null,
    ) {
        $maxAttempts >= 1 || throw new \InvalidArgumentException('maxAttempts must be at least 1');
        $baseDelay >= 0 && $maxDelay >= $baseDelay
            || throw new \InvalidArgumentException('need 0 <= baseDelay <= maxDelay');
        $jitter >= 0 && $jitter <= 1 || throw new \InvalidArgumentException('jitter must be in [0, 1]');
        $this->sleeper = $sleeper !== null
            ? $sleeper(...)
            : static function (float $seconds): void {
                usleep((int) round($seconds * 1e6));
            };
        $this->random = $random !== null
            ? $random(...)
            : static fn (): float => mt_rand() / mt_getrandmax();
    }

    /** A policy that never retries. */
    public static function never(): self
    {
        return new self(maxAttempts: 1);
    }

    /** True if try number `$attempt` (1 for the first) failed with an error worth another try. */
    public function shouldRetry(ChargeonceException $error, int $attempt): bool
    {
        return $error instanceof TransientException && $attempt < $this->maxAttempts;
    }

    /** Seconds to wait before retry number `$retry` (1 for the first). */
    public function delay(int $retry, ?int $retryAfter = null): float
    {
        $backoff = min($this->maxDelay, $this->baseDelay * 2 ** ($retry - 1));
        $backoff *= 1 - $this->jitter * ($this->random)();
        // The server's Retry-After is a floor, bounded like the rest.
        return max($backoff, min((float) ($retryAfter ?? 0), $this->maxDelay));
    }

    /** Waits before retry number `$retry`. */
    public function wait(int $retry, ?int $retryAfter = null): void
    {
        ($this->sleeper)($this->delay($retry, $retryAfter));
    }
}
