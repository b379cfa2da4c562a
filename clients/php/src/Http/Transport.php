<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Http;

use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\ConnectionException;

/**
 * How the client reaches the server: CurlTransport in production, a fake in
 * the unit tests (which then run without a server).
 */
interface Transport
{
    /**
     * Sends one request and returns its answer, whatever its status.
     *
     * @throws ConnectionException when no answer came (not connected, broken, timed out)
     */
    public function send(Request $request): Response;

    /**
     * Opens an event stream: returns once the server answered 200.
     *
     * @throws ConnectionException when no answer came
     * @throws ChargeonceException the server's refusal (401, 403, 422, 503 too_many_streams)
     */
    public function stream(Request $request): EventSource;
}
