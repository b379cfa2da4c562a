<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Unit;

use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\ChargeonceInvalidArgumentException;
use Chargeonce\Exception\Errors;
use Chargeonce\Exception\InsufficientImagesException;
use Chargeonce\Exception\StorageUnavailableException;
use Chargeonce\Exception\TransientException;
use Chargeonce\Exception\UnexpectedResponseException;
use Chargeonce\Http\Response;
use Chargeonce\Tests\Support\FakeTransport;
use PHPUnit\Framework\TestCase;

/** Each error name of the API becomes its own exception class, carrying name, message and status. */
final class ErrorsTest extends TestCase
{
    /** Every error name docs/http.md and docs/openapi.yaml document, with its HTTP status. */
    private const DOCUMENTED = [
        'busy' => 409, 'too_late' => 409, 'invalid_state' => 409, 'already_exists' => 409,
        'already_started' => 409, 'insufficient_messages' => 402, 'insufficient_images' => 402,
        'insufficient_funds' => 402, 'not_found' => 404, 'expired' => 410, 'invalid_argument' => 422,
        'chat_blocked' => 403, 'chat_banned' => 403, 'storage_unavailable' => 503, 'overloaded' => 503,
        'request_timeout' => 503, 'internal' => 500, 'malformed_json' => 400, 'bad_request' => 400,
        'unauthorized' => 401, 'forbidden' => 403, 'no_route' => 404, 'method_not_allowed' => 405,
        'payload_too_large' => 413, 'too_many_streams' => 503, 'not_ready' => 503,
    ];

    /** @return iterable<string, array{string, int}> */
    public static function documented(): iterable
    {
        foreach (self::DOCUMENTED as $name => $status) {
            yield $name => [$name, $status];
        }
    }

    public function testEveryDocumentedNameHasAClassOfItsOwn(): void
    {
        $names = Errors::names();
        sort($names);
        $documented = array_keys(self::DOCUMENTED);
        sort($documented);
        self::assertSame($documented, $names);
        $classes = array_map(Errors::classOf(...), $names);
        self::assertSame($classes, array_unique($classes));
        self::assertNotContains(ChargeonceException::class, $classes);
    }

    /** @dataProvider documented */
    public function testAnErrorAnswerBecomesItsClassWithNameMessageAndStatus(string $name, int $status): void
    {
        $e = Errors::fromResponse(FakeTransport::error($status, $name, "context of $name"));

        self::assertInstanceOf(Errors::classOf($name), $e);
        self::assertInstanceOf(ChargeonceException::class, $e);
        self::assertSame($name, $e->error);
        self::assertSame($name, $e::ERROR);
        self::assertSame("context of $name", $e->getMessage());
        self::assertSame($status, $e->status);
        self::assertSame($status === 503 ? 1 : null, $e->retryAfter);
    }

    public function testTheClassNamesReadAsTheErrorNames(): void
    {
        self::assertInstanceOf(
            InsufficientImagesException::class,
            Errors::fromResponse(FakeTransport::error(402, 'insufficient_images')),
        );
        // Not PHP's \InvalidArgumentException, which a `use` would shadow.
        self::assertSame(ChargeonceInvalidArgumentException::class, Errors::classOf('invalid_argument'));
    }

    public function testExactlyTheFourUnknownOutcomeOrNothingDoneErrorsAreTransient(): void
    {
        $transient = array_values(array_filter(
            Errors::names(),
            static fn (string $name): bool => is_subclass_of(Errors::classOf($name), TransientException::class),
        ));
        sort($transient);
        self::assertSame(['overloaded', 'request_timeout', 'storage_unavailable'], $transient);
        self::assertTrue(is_subclass_of(\Chargeonce\Exception\ConnectionException::class, TransientException::class));
    }

    public function testAnUnknownNameIsTheBaseClassWithItsName(): void
    {
        $e = Errors::fromResponse(FakeTransport::error(409, 'newer_than_this_client', 'from a newer server'));

        self::assertSame(ChargeonceException::class, $e::class);
        self::assertSame('newer_than_this_client', $e->error);
        self::assertSame('from a newer server', $e->getMessage());
        self::assertSame(409, $e->status);
    }

    public function testAnAnswerWithoutAnErrorObjectSaysWhatCame(): void
    {
        $e = Errors::fromResponse(new Response(502, '<html>Bad Gateway</html>'));

        self::assertInstanceOf(UnexpectedResponseException::class, $e);
        self::assertSame(502, $e->status);
        self::assertStringContainsString('Bad Gateway', $e->getMessage());
        self::assertNotInstanceOf(StorageUnavailableException::class, $e);
    }
}
