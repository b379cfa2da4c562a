<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Http;

use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\ConnectionException;
use Chargeonce\Exception\Errors;

/**
 * An event stream read through curl_multi, so that reading waits at most
 * as long as the caller says and a caller can do other work between reads.
 * Has a curl handle of its own: the client's handle stays free for requests.
 */
final class CurlEventSource implements EventSource
{
    private \CurlMultiHandle $multi;
    private \CurlHandle $handle;
    private string $buffer = '';
    /** @var array<string, string> */
    private array $headers = [];
    private int $status = 0;
    private bool $done = false;
    private ?ConnectionException $failure = null;
    private bool $closed = false;

    /** @param array<int, mixed> $options the transport's options for this request */
    private function __construct(private readonly Request $request, array $options)
    {
        $this->handle = curl_init();
        curl_setopt_array($this->handle, $options + [
            CURLOPT_WRITEFUNCTION => function ($_, string $chunk): int {
                $this->buffer .= $chunk;
                return strlen($chunk);
            },
            CURLOPT_HEADERFUNCTION => function ($_, string $line): int {
                if (preg_match('#^HTTP/\S+\s+(\d{3})#', $line, $m) === 1) {
                    $this->status = (int) $m[1];
                }
                CurlTransport::header($line, $this->headers);
                return strlen($line);
            },
        ]);
        $this->multi = curl_multi_init();
        curl_multi_add_handle($this->multi, $this->handle);
    }

    /**
     * Connects and waits up to `$timeout` seconds for the answer's status:
     * returns the open stream on 200.
     *
     * @param array<int, mixed> $options
     * @throws ConnectionException when no answer came in time
     * @throws ChargeonceException the server's refusal (401, 403, 422, 503)
     */
    public static function open(Request $request, array $options, float $timeout): self
    {
        $source = new self($request, $options);
        $until = microtime(true) + $timeout;
        // Until the header block is complete: the body's first byte, or the end.
        while ($source->buffer === '' && !$source->done && microtime(true) < $until) {
            $source->pump($until - microtime(true));
        }
        if ($source->failure !== null) {
            $source->close();
            throw $source->failure;
        }
        if ($source->status === 200) {
            return $source;
        }
        // A refusal is short: read it to its end, then say what it was.
        while (!$source->done && microtime(true) < $until) {
            $source->pump($until - microtime(true));
        }
        $source->close();
        if ($source->status === 0) {
            $why = sprintf('no answer within %.1f s', $timeout);
            throw CurlTransport::noAnswer($request, $why, CURLE_OPERATION_TIMEDOUT);
        }
        throw Errors::fromResponse(new Response($source->status, $source->buffer, $source->headers));
    }

    public function read(float $seconds): string
    {
        $until = microtime(true) + $seconds;
        while ($this->buffer === '' && !$this->done && microtime(true) < $until) {
            $this->pump($until - microtime(true));
        }
        $out = $this->buffer;
        $this->buffer = '';
        if ($out === '' && $this->failure !== null) {
            throw $this->failure;
        }
        return $out;
    }

    public function ended(): bool
    {
        return $this->done && $this->failure === null && $this->buffer === '';
    }

    public function close(): void
    {
        if ($this->closed) {
            return;
        }
        $this->closed = true;
        curl_multi_remove_handle($this->multi, $this->handle);
        curl_multi_close($this->multi); // closes the connection: the server frees the stream's slot
        curl_reset($this->handle); // drops the callbacks, which hold $this
        curl_close($this->handle);
    }

    /** Moves the transfer on, waiting up to `$seconds` (at most 0.2 s at a time) for the socket. */
    private function pump(float $seconds): void
    {
        if ($this->closed || $this->done) {
            return;
        }
        $this->perform();
        if ($this->buffer !== '' || $this->done) {
            return;
        }
        if (curl_multi_select($this->multi, max(0.0, min($seconds, 0.2))) === -1) {
            usleep(10000); // no socket to wait on yet (resolving, connecting)
        }
        $this->perform();
    }

    private function perform(): void
    {
        do {
            $code = curl_multi_exec($this->multi, $running);
        } while ($code === CURLM_CALL_MULTI_PERFORM);
        while (($info = curl_multi_info_read($this->multi)) !== false) {
            if ($info['msg'] !== CURLMSG_DONE) {
                continue;
            }
            $this->done = true;
            if ($info['result'] !== CURLE_OK) {
                $why = (string) curl_strerror($info['result']);
                $this->failure = CurlTransport::noAnswer($this->request, $why, $info['result']);
            }
        }
    }
}
