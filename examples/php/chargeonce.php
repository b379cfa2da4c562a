<?php
// SPDX-License-Identifier: Apache-2.0
// A small client of chargeonce's HTTP API for the PHP examples: plain PHP
// with the curl extension (Debian: php-cli, php-curl), no framework.

declare(strict_types=1);

final class Chargeonce
{
    private string $url;
    private string $token;

    public function __construct(?string $url = null, ?string $token = null)
    {
        $this->url = rtrim($url ?? (getenv('CHARGEONCE_URL') ?: 'http://127.0.0.1:8080'), '/');
        $this->token = $token ?? (string) getenv('CHARGEONCE_TOKEN');
    }

    /**
     * One request. Returns [HTTP status, decoded JSON body]: errors are
     * answers too ({"error": ..., "message": ...}); status 0 when no answer
     * came (the outcome is unknown: retry with the same ids).
     */
    public function call(string $method, string $path, ?array $body = null): array
    {
        $h = curl_init($this->url . $path);
        curl_setopt_array($h, [
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_TIMEOUT => 30,
            CURLOPT_HTTPHEADER => [
                'Authorization: Bearer ' . $this->token,
                'Content-Type: application/json',
            ],
            CURLOPT_POSTFIELDS => $body === null ? '' : json_encode($body),
        ]);
        $text = curl_exec($h);
        $status = (int) curl_getinfo($h, CURLINFO_RESPONSE_CODE);
        curl_close($h);
        if ($text === false) {
            return [0, ['error' => 'transport', 'message' => 'no answer']];
        }
        return [$status, json_decode($text, true) ?? []];
    }

    /**
     * The event stream (GET /v1/events), read without blocking the caller:
     * next($seconds) returns "subscribed" first, then each event as an
     * array, or null when none came in time.
     */
    public function events(): EventStream
    {
        return new EventStream($this->url . '/v1/events', $this->token);
    }
}

final class EventStream
{
    private $multi;
    private $handle;
    private string $buffer = '';
    private array $ready = [];

    public function __construct(string $url, string $token)
    {
        $this->handle = curl_init($url);
        curl_setopt_array($this->handle, [
            CURLOPT_HTTPHEADER => ['Authorization: Bearer ' . $token],
            CURLOPT_WRITEFUNCTION => function ($h, string $chunk): int {
                $this->buffer .= $chunk;
                while (($at = strpos($this->buffer, "\n")) !== false) {
                    $line = substr($this->buffer, 0, $at);
                    $this->buffer = substr($this->buffer, $at + 1);
                    if ($line === ': subscribed') {
                        $this->ready[] = 'subscribed';
                    } elseif (str_starts_with($line, 'data: ')) {
                        $this->ready[] = json_decode(substr($line, 6), true);
                    }
                }
                return strlen($chunk);
            },
        ]);
        $this->multi = curl_multi_init();
        curl_multi_add_handle($this->multi, $this->handle);
    }

    public function next(float $seconds)
    {
        $until = microtime(true) + $seconds;
        while (!$this->ready && microtime(true) < $until) {
            curl_multi_exec($this->multi, $running);
            if (!$running) {
                break; // the stream ended (the server went away)
            }
            curl_multi_select($this->multi, 0.1);
        }
        return array_shift($this->ready);
    }

    public function __destruct()
    {
        curl_multi_remove_handle($this->multi, $this->handle);
        curl_close($this->handle);
        curl_multi_close($this->multi);
    }
}

function say(array $fields): void
{
    echo json_encode($fields), "\n";
}
