<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

use Chargeonce\Exception\UnexpectedResponseException;

/**
 * Reads the fields of a decoded answer with their documented types. A field
 * missing or of another type is an UnexpectedResponseException naming it:
 * a server and a client that drifted apart say so at once instead of
 * handing a null to code that charges money.
 *
 * @internal
 */
final class Json
{
    /** @param array<mixed> $x */
    public static function int(array $x, string $key): int
    {
        $v = $x[$key] ?? null;
        return is_int($v) ? $v : throw self::wrong($key, 'an integer', $x);
    }

    /** @param array<mixed> $x */
    public static function intOrNull(array $x, string $key): ?int
    {
        $v = $x[$key] ?? null;
        return $v === null || is_int($v) ? $v : throw self::wrong($key, 'an integer or null', $x);
    }

    /** @param array<mixed> $x */
    public static function string(array $x, string $key): string
    {
        $v = $x[$key] ?? null;
        return is_string($v) ? $v : throw self::wrong($key, 'a string', $x);
    }

    /** @param array<mixed> $x */
    public static function stringOrNull(array $x, string $key): ?string
    {
        $v = $x[$key] ?? null;
        return $v === null || is_string($v) ? $v : throw self::wrong($key, 'a string or null', $x);
    }

    /** @param array<mixed> $x */
    public static function bool(array $x, string $key): bool
    {
        $v = $x[$key] ?? null;
        return is_bool($v) ? $v : throw self::wrong($key, 'a boolean', $x);
    }

    /** @param array<mixed> $x */
    public static function boolOrNull(array $x, string $key): ?bool
    {
        $v = $x[$key] ?? null;
        return $v === null || is_bool($v) ? $v : throw self::wrong($key, 'a boolean or null', $x);
    }

    /** An ISO 8601 time ("2026-12-07T05:10:44.331559Z"). @param array<mixed> $x */
    public static function time(array $x, string $key): \DateTimeImmutable
    {
        return self::timeOrNull($x, $key) ?? throw self::wrong($key, 'a time', $x);
    }

    /** @param array<mixed> $x */
    public static function timeOrNull(array $x, string $key): ?\DateTimeImmutable
    {
        $v = self::stringOrNull($x, $key);
        if ($v === null) {
            return null;
        }
        try {
            return new \DateTimeImmutable($v);
        } catch (\Exception) {
            throw self::wrong($key, 'an ISO 8601 time', $x);
        }
    }

    /**
     * A JSON object or array (both decode to a PHP array).
     *
     * @param array<mixed> $x
     * @return array<mixed>
     */
    public static function array(array $x, string $key): array
    {
        $v = $x[$key] ?? null;
        return is_array($v) ? $v : throw self::wrong($key, 'an object or array', $x);
    }

    /**
     * @param array<mixed> $x
     * @return ?array<mixed>
     */
    public static function arrayOrNull(array $x, string $key): ?array
    {
        $v = $x[$key] ?? null;
        return $v === null || is_array($v) ? $v : throw self::wrong($key, 'an object, array or null', $x);
    }

    /**
     * Amounts by pocket name, e.g. {"balance": -1}.
     *
     * @param array<mixed> $x
     * @return array<string, int>
     */
    public static function amounts(array $x, string $key): array
    {
        $out = [];
        foreach (self::array($x, $key) as $name => $amount) {
            is_int($amount) || throw self::wrong("$key.$name", 'an integer', $x);
            $out[(string) $name] = $amount;
        }
        return $out;
    }

    /**
     * Decodes an answer's body, which must be a JSON object.
     *
     * @return array<mixed>
     */
    public static function decode(string $body, int $status): array
    {
        $x = json_decode($body, true);
        return is_array($x) ? $x : throw new UnexpectedResponseException(
            'HTTP ' . $status . ' with a body that is not a JSON object: ' . substr($body, 0, 200),
            $status,
        );
    }

    /** @param array<mixed> $x */
    private static function wrong(string $key, string $what, array $x): UnexpectedResponseException
    {
        return new UnexpectedResponseException(
            sprintf('field "%s" is not %s in %s', $key, $what, substr((string) json_encode($x), 0, 300)),
            200,
        );
    }
}
