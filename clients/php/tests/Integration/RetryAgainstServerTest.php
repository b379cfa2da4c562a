<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Integration;

use Chargeonce\Exception\ConnectionException;
use Chargeonce\HistoryEntry;
use Chargeonce\Http\CurlTransport;
use Chargeonce\Http\Request;
use Chargeonce\RetryPolicy;
use Chargeonce\Tests\Support\LosingTransport;

/**
 * The client's retries against the real server: answers lost after the
 * server acted (LosingTransport) are retried with the same ids and find
 * what the first try did; nothing is held or charged twice.
 */
final class RetryAgainstServerTest extends IntegrationTestCase
{
    /** @var list<float> */
    private array $slept = [];

    private function retry(int $maxAttempts = 5): RetryPolicy
    {
        return new RetryPolicy(maxAttempts: $maxAttempts, sleeper: function (float $s): void {
            $this->slept[] = $s; // the server acted already: nothing to wait for
        });
    }

    private static function requestId(Request $r): string
    {
        return json_decode((string) $r->body, true)['request_id'];
    }

    public function testAReserveWithoutARequestIdRetriedAfterALostAnswerIsOneJob(): void
    {
        $transport = new LosingTransport($this->curl());
        $client = $this->client($transport, $this->retry());
        $chat = self::newChat();
        $client->createChat($chat, balance: 2);
        $transport->loseAnswers('POST', '#/reservations$#', 2);

        $job = $client->reserve($chat, 'image');

        $sent = $transport->sentTo('POST', '#/reservations$#');
        self::assertCount(3, $sent, 'two answers lost, the third read');
        self::assertSame(array_fill(0, 3, $job->request_id), array_map(self::requestId(...), $sent));
        self::assertStringStartsWith('auto:', $job->request_id);
        $status = $client->status($chat);
        self::assertSame([$job->id], array_map(static fn ($r) => $r->id, $status->reservations), 'one job');
        self::assertSame(1, $status->held->balance, 'held once');
        self::assertCount(2, $this->slept);
    }

    public function testAReserveWithTheCallersRequestIdRetriedIsOneJob(): void
    {
        $transport = new LosingTransport($this->curl());
        $client = $this->client($transport, $this->retry());
        $chat = self::newChat();
        $client->createChat($chat, balance: 2, maxActiveJobs: 2);
        $transport->loseAnswers('POST', '#/reservations$#');

        $job = $client->reserve($chat, 'image', 'msg-18-upscale');

        self::assertSame('msg-18-upscale', $job->request_id);
        self::assertCount(2, $transport->sentTo('POST', '#/reservations$#'));
        // The chat runs two jobs at once: a second one would have been held.
        self::assertCount(1, $client->status($chat)->reservations);
    }

    public function testACommitRetriedAfterALostAnswerIsChargedOnce(): void
    {
        $transport = new LosingTransport($this->curl());
        $client = $this->client($transport, $this->retry());
        $chat = self::newChat();
        $client->createChat($chat, balance: 3);
        $job = $client->reserve($chat, 'image', 'commit-1');
        $transport->loseAnswers('POST', '#/start$#');
        $started = $client->start($chat, $job->id, 'worker-1');
        self::assertSame('in_progress', $started->status, 'the same worker on the retry');
        $transport->loseAnswers('POST', '#/commit$#', 2);

        $receipt = $client->commit($chat, $job->id, worker: 'worker-1');

        self::assertCount(3, $transport->sentTo('POST', '#/commit$#'));
        self::assertSame(1, $receipt->charged->balance);
        self::assertSame(2, $client->status($chat)->balance, 'charged once');
        $commits = array_filter(
            $client->history($chat)->entries,
            static fn (HistoryEntry $e): bool => $e->cause === 'commit' && $e->reservation === $job->id,
        );
        self::assertCount(1, $commits, 'one commit in the ledger');
        $again = $client->commit($chat, $job->id, worker: 'worker-1');
        self::assertEquals($receipt, $again, 'a repeat answers the first receipt');
    }

    public function testACancelWhoseAnswerIsLostIsNotRepeated(): void
    {
        $transport = new LosingTransport($this->curl());
        $client = $this->client($transport, $this->retry());
        $chat = self::newChat();
        $client->createChat($chat, balance: 2);
        $client->reserve($chat, 'image', 'cancel-1');
        $transport->loseAnswers('DELETE', '#/reservation$#');

        try {
            $client->cancel($chat);
            self::fail('a cancel whose answer was lost returned');
        } catch (ConnectionException $e) {
            self::assertStringContainsString('lost on purpose', $e->getMessage());
        }

        self::assertCount(1, $transport->sentTo('DELETE', '#/reservation$#'));
        self::assertSame([], $this->slept);
        // The first try did cancel it: a repeat would have answered not_found, or cancelled a newer job.
        self::assertNull($client->status($chat)->reservation);
    }

    public function testNoServerMeansBoundedTriesThenAConnectionException(): void
    {
        // A port that was free a moment ago: connections are refused.
        $socket = stream_socket_server('tcp://127.0.0.1:0');
        $port = (int) substr((string) strrchr((string) stream_socket_get_name($socket, false), ':'), 1);
        fclose($socket);
        $client = $this->client(new CurlTransport("http://127.0.0.1:$port", connectTimeout: 5.0), $this->retry(3));

        try {
            $client->status(self::newChat());
            self::fail('an answer from a closed port');
        } catch (ConnectionException $e) {
            self::assertSame([0, 'connection'], [$e->status, $e->error]);
            self::assertSame(CURLE_COULDNT_CONNECT, $e->curlErrno);
        }
        self::assertCount(2, $this->slept);
    }
}
