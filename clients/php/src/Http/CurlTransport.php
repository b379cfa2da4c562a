<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Http;

use Chargeonce\Exception\ConnectionException;

/**
 * The client's HTTP over ext-curl: one curl handle for all requests, so its
 * connection stays open between them (keep-alive; the server closes it
 * after `http-timeout` idle, and curl reconnects), and one more handle per
 * event stream, which holds its connection for as long as it lasts.
 */
final class CurlTransport implements Transport
{
    private const USER_AGENT = 'chargeonce-php/0.2';

    private ?\CurlHandle $handle = null;

    /**
     * @param string $baseUrl e.g. "http://127.0.0.1:8080" or "https://billing.internal"
     * @param float $connectTimeout seconds to connect (TCP and TLS)
     * @param float $timeout seconds per request, connect included: the answer's liveness bound
     * @param ?string $caFile the CA to trust for an HTTPS server with its own certificates
     * @param float $streamIdleTimeout an event stream silent this long is dead (the server writes every second)
     */
    public function __construct(
        private readonly string $baseUrl,
        private readonly float $connectTimeout = 5.0,
        private readonly float $timeout = 15.0,
        private readonly ?string $caFile = null,
        private readonly float $streamIdleTimeout = 10.0,
    ) {
    }

    public function __destruct()
    {
        if ($this->handle !== null) {
            curl_close($this->handle);
        }
    }

    public function send(Request $request): Response
    {
        // Reset, not a new handle: options start afresh, the open connection is kept.
        $this->handle ??= curl_init();
        curl_reset($this->handle);
        $headers = [];
        curl_setopt_array($this->handle, $this->options($request) + [
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_TIMEOUT_MS => self::ms($this->timeout),
            CURLOPT_HEADERFUNCTION => static function ($_, string $line) use (&$headers): int {
                self::header($line, $headers);
                return strlen($line);
            },
        ]);
        $body = curl_exec($this->handle);
        if ($body === false) {
            throw self::noAnswer($request, curl_error($this->handle), curl_errno($this->handle));
        }
        return new Response((int) curl_getinfo($this->handle, CURLINFO_RESPONSE_CODE), (string) $body, $headers);
    }

    public function stream(Request $request): EventSource
    {
        // No overall timeout: the stream lasts; less than a byte a second
        // for streamIdleTimeout ends it (the server writes every second).
        $idle = [CURLOPT_LOW_SPEED_LIMIT => 1, CURLOPT_LOW_SPEED_TIME => (int) ceil($this->streamIdleTimeout)];
        return CurlEventSource::open($request, $this->options($request) + $idle, $this->timeout);
    }

    /**
     * The options every request shares.
     *
     * @return array<int, mixed>
     */
    private function options(Request $request): array
    {
        $headers = ['Accept: application/json', 'Expect:'];
        if ($request->token !== null) {
            $headers[] = 'Authorization: Bearer ' . $request->token;
        }
        if ($request->body !== null) {
            $headers[] = 'Content-Type: application/json';
        }
        foreach ($request->headers as $name => $value) {
            $headers[] = $name . ': ' . $value;
        }
        $options = [
            CURLOPT_URL => rtrim($this->baseUrl, '/') . $request->path,
            CURLOPT_CUSTOMREQUEST => $request->method,
            CURLOPT_HTTPHEADER => $headers,
            CURLOPT_CONNECTTIMEOUT_MS => self::ms($this->connectTimeout),
            CURLOPT_NOSIGNAL => true,
            CURLOPT_USERAGENT => self::USER_AGENT,
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
        ];
        if ($request->body !== null || in_array($request->method, ['POST', 'PUT', 'PATCH'], true)) {
            // A POST without a body still says Content-Length: 0.
            $options[CURLOPT_POSTFIELDS] = $request->body ?? '';
        }
        if ($this->caFile !== null) {
            $options[CURLOPT_CAINFO] = $this->caFile;
        }
        return $options;
    }

    /**
     * Adds one header line to `$headers` (by lower-case name); a status line
     * starts afresh (a 100 Continue's headers are not the answer's).
     *
     * @param array<string, string> $headers
     */
    public static function header(string $line, array &$headers): void
    {
        if (str_starts_with($line, 'HTTP/')) {
            $headers = [];
            return;
        }
        $colon = strpos($line, ':');
        if ($colon !== false) {
            $headers[strtolower(trim(substr($line, 0, $colon)))] = trim(substr($line, $colon + 1));
        }
    }

    public static function noAnswer(Request $request, string $error, int $errno): ConnectionException
    {
        return new ConnectionException(sprintf('%s %s: %s', $request->method, $request->path, $error), $errno);
    }

    private static function ms(float $seconds): int
    {
        return max(1, (int) ceil($seconds * 1000));
    }
}
