<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * Server-Sent Events framing: turns the stream's bytes, in chunks cut
 * anywhere, into its messages. Lines end in LF, CRLF or CR; a blank line
 * ends a message; `event:`, `data:` (several are joined with LF) and `id:`
 * are kept, a line starting with ":" is a comment (the server's
 * `: subscribed` and its keep-alive every second), other fields are ignored
 * (the HTML standard's rules, without its retry handling: the client
 * decides when to reconnect).
 *
 * @internal
 */
final class SseParser
{
    private string $pending = '';
    private string $event = '';
    /** @var list<string> */
    private array $data = [];
    private ?string $id = null;
    private bool $hasFields = false;

    /**
     * Feeds the next chunk; returns the messages it completed, in order:
     * ['comment' => text] or ['event' => name, 'data' => text, 'id' => ?string].
     *
     * @return list<array{comment?: string, event?: string, data?: string, id?: ?string}>
     */
    public function feed(string $chunk): array
    {
        $this->pending .= $chunk;
        $out = [];
        while (preg_match('/\r\n|\n|\r/', $this->pending, $m, PREG_OFFSET_CAPTURE) === 1) {
            [$eol, $at] = $m[0];
            // A CR at the very end may be the first half of a CRLF: wait for the next byte.
            if ($eol === "\r" && $at === strlen($this->pending) - 1) {
                break;
            }
            $line = substr($this->pending, 0, $at);
            $this->pending = substr($this->pending, $at + strlen($eol));
            $message = $this->line($line);
            if ($message !== null) {
                $out[] = $message;
            }
        }
        return $out;
    }

    /** @return ?array{comment?: string, event?: string, data?: string, id?: ?string} */
    private function line(string $line): ?array
    {
        if ($line === '') {
            return $this->dispatch();
        }
        if ($line[0] === ':') {
            return ['comment' => ltrim(substr($line, 1), ' ')];
        }
        [$field, $value] = array_pad(explode(':', $line, 2), 2, '');
        if (str_starts_with($value, ' ')) {
            $value = substr($value, 1);
        }
        match ($field) {
            'event' => $this->event = $value,
            'data' => $this->data[] = $value,
            'id' => $this->id = $value,
            default => null,
        };
        $this->hasFields = true;
        return null;
    }

    /** @return ?array{event: string, data: string, id: ?string} */
    private function dispatch(): ?array
    {
        if (!$this->hasFields) {
            return null;
        }
        $message = ['event' => $this->event, 'data' => implode("\n", $this->data), 'id' => $this->id];
        $this->event = '';
        $this->data = [];
        $this->id = null;
        $this->hasFields = false;
        return $message;
    }
}
