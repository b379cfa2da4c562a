<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Support;

use Chargeonce\Exception\ConnectionException;
use Chargeonce\Http\EventSource;
use Chargeonce\Http\Request;
use Chargeonce\Http\Response;
use Chargeonce\Http\Transport;

/**
 * A real transport that loses answers on purpose: a request it was told to
 * lose reaches the server and is acted on, then its answer is dropped and
 * the client sees no answer (a ConnectionException), as after a timeout or
 * a connection reset between the server's commit and the client's read.
 */
final class LosingTransport implements Transport
{
    /** @var list<Request> every request sent, lost answers included */
    public array $sent = [];
    /** @var list<array{string, string, int}> method, path pattern, how many answers to lose */
    private array $rules = [];

    public function __construct(private readonly Transport $inner)
    {
    }

    /** Loses the answers of the next `$count` requests of `$method` whose path matches `$pathPattern`. */
    public function loseAnswers(string $method, string $pathPattern, int $count = 1): void
    {
        $this->rules[] = [$method, $pathPattern, $count];
    }

    /** @return list<Request> the requests sent of `$method` on paths matching `$pathPattern` */
    public function sentTo(string $method, string $pathPattern): array
    {
        return array_values(array_filter(
            $this->sent,
            static fn (Request $r): bool => $r->method === $method && preg_match($pathPattern, $r->path) === 1,
        ));
    }

    public function send(Request $request): Response
    {
        $this->sent[] = $request;
        $response = $this->inner->send($request);
        foreach ($this->rules as $i => [$method, $pattern, $count]) {
            if ($count > 0 && $request->method === $method && preg_match($pattern, $request->path) === 1) {
                $this->rules[$i][2] = $count - 1;
                $what = sprintf('%s %s: the answer (HTTP %d)', $request->method, $request->path, $response->status);
                throw new ConnectionException("$what was lost on purpose (test)", 52);
            }
        }
        return $response;
    }

    public function stream(Request $request): EventSource
    {
        return $this->inner->stream($request);
    }
}
