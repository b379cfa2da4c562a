<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

use Chargeonce\Http\Response;

/** Turns an error answer of the server into its exception. */
final class Errors
{
    /**
     * One class per error name of docs/http.md: the service's (the CLI's
     * names), the HTTP layer's and the event stream's.
     */
    private const CLASSES = [
        BusyException::class,
        TooLateException::class,
        InvalidStateException::class,
        AlreadyExistsException::class,
        AlreadyStartedException::class,
        InsufficientMessagesException::class,
        InsufficientImagesException::class,
        InsufficientFundsException::class,
        NotFoundException::class,
        ExpiredException::class,
        ChargeonceInvalidArgumentException::class,
        ChatBlockedException::class,
        ChatBannedException::class,
        StorageUnavailableException::class,
        OverloadedException::class,
        RequestTimeoutException::class,
        InternalException::class,
        MalformedJsonException::class,
        BadRequestException::class,
        UnauthorizedException::class,
        ForbiddenException::class,
        NoRouteException::class,
        MethodNotAllowedException::class,
        PayloadTooLargeException::class,
        TooManyStreamsException::class,
        NotReadyException::class,
    ];

    /** @var ?array<string, class-string<ChargeonceException>> */
    private static ?array $byName = null;

    /**
     * The class of error name `$error`; ChargeonceException itself for a
     * name this client does not know.
     *
     * @return class-string<ChargeonceException>
     */
    public static function classOf(string $error): string
    {
        if (self::$byName === null) {
            self::$byName = [];
            foreach (self::CLASSES as $class) {
                self::$byName[$class::ERROR] = $class;
            }
        }
        return self::$byName[$error] ?? ChargeonceException::class;
    }

    /** @return list<string> every error name with a class of its own */
    public static function names(): array
    {
        return array_map(static fn (string $class): string => $class::ERROR, self::CLASSES);
    }

    /** The exception an answer with a status of 400 or more stands for. */
    public static function fromResponse(Response $response): ChargeonceException
    {
        $json = json_decode($response->body, true);
        if (!is_array($json) || !is_string($json['error'] ?? null)) {
            // Not the server's own answer (a proxy's page?): say what came.
            return new UnexpectedResponseException(
                sprintf('HTTP %d without an error object: %s', $response->status,
                    substr(trim($response->body), 0, 200)),
                $response->status,
            );
        }
        $class = self::classOf($json['error']);
        $retryAfter = $response->header('retry-after');
        return new $class(
            $json['error'],
            is_string($json['message'] ?? null) ? $json['message'] : '',
            $response->status,
            $retryAfter !== null && ctype_digit($retryAfter) ? (int) $retryAfter : null,
        );
    }
}
