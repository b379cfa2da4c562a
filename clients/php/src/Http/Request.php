<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Http;

/**
 * One HTTP request as the client sends it. Built once per call and sent
 * unchanged on every retry: the same request id, payment id and worker.
 */
final readonly class Request
{
    /**
     * @param string $method GET, POST, PUT, PATCH or DELETE
     * @param string $path the path and query, e.g. "/v1/chats/42/history?limit=10"
     * @param ?string $token the role's bearer token; null sends none
     * @param ?string $body JSON text; null sends no body
     * @param array<string, string> $headers more headers, by name
     */
    public function __construct(
        public string $method,
        public string $path,
        public ?string $token = null,
        public ?string $body = null,
        public array $headers = [],
    ) {
    }
}
