<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Integration;

use Chargeonce\Client;
use Chargeonce\Http\CurlTransport;
use Chargeonce\Http\Transport;
use Chargeonce\RetryPolicy;
use PHPUnit\Framework\TestCase;

/**
 * Tests against a real chargeonce-server, which tests/clients/php.sh starts
 * with HTTP on and these settings, which the tests rely on:
 *   --queue-notice-delay=1s --lease-duration=3s --sweep-interval=1s
 * The environment names it: CHARGEONCE_TEST_URL and
 * CHARGEONCE_TEST_{GATEWAY,WORKER,ADMIN}_TOKEN. Without them the tests are
 * skipped (the script runs phpunit with --fail-on-skipped).
 *
 * Each test uses chats of its own (random ids), so they never meet.
 */
abstract class IntegrationTestCase extends TestCase
{
    /**
     * Every wait for the server's timers is bounded by this many seconds: a
     * liveness bound, over 10x what the timers take (the queue notice 1 s,
     * lease 3 s + sweep 1 s), never a judgement of speed.
     */
    protected const WAIT_SECONDS = 60.0;

    protected string $url;
    protected string $gatewayToken;
    protected string $workerToken;
    protected string $adminToken;

    protected function setUp(): void
    {
        $this->url = self::env('CHARGEONCE_TEST_URL');
        $this->gatewayToken = self::env('CHARGEONCE_TEST_GATEWAY_TOKEN');
        $this->workerToken = self::env('CHARGEONCE_TEST_WORKER_TOKEN');
        $this->adminToken = self::env('CHARGEONCE_TEST_ADMIN_TOKEN');
    }

    private static function env(string $name): string
    {
        $value = getenv($name);
        if ($value === false || $value === '') {
            self::markTestSkipped("$name is not set: tests/clients/php.sh starts a server and sets it");
        }
        return $value;
    }

    /**
     * A client with every role's token. Its answers get 60 s per try: a
     * liveness bound (answers take milliseconds; on a loaded CI machine
     * they have come seconds late).
     */
    protected function client(?Transport $transport = null, ?RetryPolicy $retry = null): Client
    {
        return new Client(
            $this->url,
            $this->gatewayToken,
            $this->workerToken,
            $this->adminToken,
            timeout: 60.0,
            retry: $retry,
            transport: $transport,
        );
    }

    protected function curl(): CurlTransport
    {
        return new CurlTransport($this->url, timeout: 60.0);
    }

    /** A random 12-digit chat id: reruns and other tests never meet it. */
    protected static function newChat(): int
    {
        return random_int(100_000_000_000, 999_999_999_999);
    }

    /**
     * Polls `$condition` every 0.1 s until it returns something other than
     * null or false, and returns that; fails after WAIT_SECONDS. Prints how
     * long it took.
     *
     * @template T
     * @param callable(): (T|null|false) $condition
     * @return T
     */
    protected function waitFor(string $what, callable $condition): mixed
    {
        $started = microtime(true);
        do {
            $result = $condition();
            if ($result !== null && $result !== false) {
                fwrite(STDERR, sprintf("\nphp: %s after %.1f s\n", $what, microtime(true) - $started));
                return $result;
            }
            usleep(100_000);
        } while (microtime(true) - $started < self::WAIT_SECONDS);
        self::fail(sprintf('%s: not within %.0f s', $what, self::WAIT_SECONDS));
    }
}
