<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Integration;

use Chargeonce\Client;
use Chargeonce\Exception\AlreadyExistsException;
use Chargeonce\Exception\AlreadyStartedException;
use Chargeonce\Exception\BusyException;
use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\ChargeonceInvalidArgumentException;
use Chargeonce\Exception\ChatBlockedException;
use Chargeonce\Exception\ExpiredException;
use Chargeonce\Exception\ForbiddenException;
use Chargeonce\Exception\InsufficientImagesException;
use Chargeonce\Exception\InsufficientMessagesException;
use Chargeonce\Exception\InvalidStateException;
use Chargeonce\Exception\NotFoundException;
use Chargeonce\Exception\UnauthorizedException;

/** The server's refusals arrive as their own exception classes, with name, message and status. */
final class ErrorClassesTest extends IntegrationTestCase
{
    /**
     * Runs `$call`, which must throw `$class` with error `$name` and `$status`.
     *
     * @param class-string<ChargeonceException> $class
     */
    private static function assertRefused(string $class, string $name, int $status, callable $call): ChargeonceException
    {
        try {
            $call();
        } catch (ChargeonceException $e) {
            self::assertInstanceOf($class, $e, $e->error . ': ' . $e->getMessage());
            self::assertSame([$name, $status], [$e->error, $e->status]);
            self::assertNotSame('', $e->getMessage(), 'the server gives context');
            return $e;
        }
        self::fail("no $name");
    }

    public function testBusyInsufficientAndNotFound(): void
    {
        $client = $this->client();
        $chat = self::newChat();
        $client->createChat($chat, dailyImages: 1);
        $client->reserve($chat, 'image', 'first');

        $busy = self::assertRefused(BusyException::class, 'busy', 409,
            fn () => $client->reserve($chat, 'image', 'second'));
        self::assertStringContainsString((string) $chat, $busy->getMessage());
        self::assertRefused(InsufficientMessagesException::class, 'insufficient_messages', 402,
            fn () => $client->reserve(self::poorChat($client), 'text', 't'));
        self::assertRefused(InsufficientImagesException::class, 'insufficient_images', 402,
            fn () => $client->reserve(self::poorChat($client), 'image', 'i'));
        self::assertRefused(NotFoundException::class, 'not_found', 404, fn () => $client->status(self::newChat()));
        self::assertRefused(AlreadyExistsException::class, 'already_exists', 409, fn () => $client->createChat($chat));
        self::assertRefused(ChargeonceInvalidArgumentException::class, 'invalid_argument', 422,
            fn () => $client->reserve($chat, 'video', 'v'));
    }

    private static function poorChat(Client $client): int
    {
        $chat = self::newChat();
        $client->createChat($chat, dailyMessages: 0, dailyImages: 0, balance: 0);
        return $chat;
    }

    public function testStateAndDeliveryRefusals(): void
    {
        $client = $this->client();
        $chat = self::newChat();
        $client->createChat($chat, balance: 3);
        $job = $client->reserve($chat, 'image', 'state-1');

        self::assertRefused(InvalidStateException::class, 'invalid_state', 409,
            fn () => $client->commit($chat, $job->id));
        $client->start($chat, $job->id, 'delivery-1');
        // The queue delivered the job again: the second worker is told, and changes nothing.
        self::assertRefused(AlreadyStartedException::class, 'already_started', 409,
            fn () => $client->start($chat, $job->id, 'delivery-2'));
        self::assertRefused(AlreadyStartedException::class, 'already_started', 409,
            fn () => $client->commit($chat, $job->id, worker: 'delivery-2'));
        self::assertSame(1, $client->commit($chat, $job->id, worker: 'delivery-1')->charged->balance);

        $client->setFlags($chat, blocked: true);
        self::assertRefused(ChatBlockedException::class, 'chat_blocked', 403,
            fn () => $client->reserve($chat, 'image', 'b'));
    }

    public function testAReleasedJobIsExpired(): void
    {
        $client = $this->client();
        $chat = self::newChat();
        $client->createChat($chat, balance: 1);
        $job = $client->reserve($chat, 'image', 'lease-1');
        $client->start($chat, $job->id);
        $client->heartbeat($chat, $job->id); // arms the 3 s lease; then silence

        $released = static fn (): bool => $client->status($chat)->reservation === null;
        $this->waitFor('the lease released the job', $released);

        self::assertRefused(ExpiredException::class, 'expired', 410, fn () => $client->commit($chat, $job->id));
        self::assertSame(1, $client->status($chat)->balance, 'nothing charged');
    }

    public function testTokens(): void
    {
        $nobody = new Client($this->url, gatewayToken: 'not-a-token-of-this-server');
        $gatewayAsAdmin = new Client($this->url, adminToken: $this->gatewayToken);

        self::assertRefused(UnauthorizedException::class, 'unauthorized', 401,
            fn () => $nobody->touch(self::newChat()));
        self::assertRefused(ForbiddenException::class, 'forbidden', 403,
            fn () => $gatewayAsAdmin->createChat(self::newChat()));
    }
}
