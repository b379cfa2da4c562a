<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Http;

use Chargeonce\Exception\ConnectionException;

/** The bytes of one open event stream, as they arrive. */
interface EventSource
{
    /**
     * What arrived within `$seconds` (at most): "" when nothing did, or when
     * the stream ended (then ended() is true).
     *
     * @throws ConnectionException when the connection broke or went silent
     */
    public function read(float $seconds): string;

    /** True once the server closed the stream (after its last bytes were read). */
    public function ended(): bool;

    /** Closes the connection; read() is not called afterwards. */
    public function close(): void;
}
