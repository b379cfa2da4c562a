<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Support;

use Chargeonce\Http\EventSource;
use Chargeonce\Http\Request;
use Chargeonce\Http\Response;
use Chargeonce\Http\Transport;

/**
 * A transport that answers from a script and records what it was sent: the
 * unit tests' server.
 */
final class FakeTransport implements Transport
{
    /** @var list<Request> every request send() got, in order */
    public array $requests = [];
    /** @var list<Request> every request stream() got, in order */
    public array $streamRequests = [];

    /**
     * @param list<Response|\Throwable> $answers send()'s answers, in order (a Throwable is thrown)
     * @param list<EventSource|\Throwable> $streams stream()'s answers, in order
     */
    public function __construct(private array $answers = [], private array $streams = [])
    {
    }

    /** @param array<mixed> $body */
    public static function json(int $status, array $body, array $headers = []): Response
    {
        return new Response($status, (string) json_encode($body), $headers);
    }

    public static function error(int $status, string $name, string $message = 'from the test'): Response
    {
        $headers = $status === 503 ? ['retry-after' => '1'] : [];
        return self::json($status, ['error' => $name, 'message' => $message], $headers);
    }

    public function send(Request $request): Response
    {
        $this->requests[] = $request;
        $answer = array_shift($this->answers)
            ?? throw new \LogicException('the test gave no answer for request ' . count($this->requests));
        if ($answer instanceof \Throwable) {
            throw $answer;
        }
        return $answer;
    }

    public function stream(Request $request): EventSource
    {
        $this->streamRequests[] = $request;
        $answer = array_shift($this->streams)
            ?? throw new \LogicException('the test gave no stream for stream ' . count($this->streamRequests));
        if ($answer instanceof \Throwable) {
            throw $answer;
        }
        return $answer;
    }
}
