<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Tests\Unit;

use Chargeonce\SseParser;
use PHPUnit\Framework\TestCase;

final class SseParserTest extends TestCase
{
    private const STREAM = ": subscribed\n\n"
        . "event: queue_notice\ndata: {\"event\":\"queue_notice\",\"chat\":42,\"reservation\":17}\n\n"
        . ":\n\n"
        . "id: 9\nevent: cancel_requested\n"
        . "data: {\"event\":\"cancel_requested\",\"chat\":42,\"reservation\":17,\"event_id\":9}\n\n";

    /** @return list<array<string, mixed>> */
    private static function parse(string ...$chunks): array
    {
        $parser = new SseParser();
        $out = [];
        foreach ($chunks as $chunk) {
            array_push($out, ...$parser->feed($chunk));
        }
        return $out;
    }

    public function testCommentsEventsAndIds(): void
    {
        self::assertSame([
            ['comment' => 'subscribed'],
            ['event' => 'queue_notice', 'data' => '{"event":"queue_notice","chat":42,"reservation":17}', 'id' => null],
            ['comment' => ''],
            ['event' => 'cancel_requested',
                'data' => '{"event":"cancel_requested","chat":42,"reservation":17,"event_id":9}', 'id' => '9'],
        ], self::parse(self::STREAM));
    }

    public function testChunksCutAnywhereGiveTheSameMessages(): void
    {
        $whole = self::parse(self::STREAM);
        for ($cut = 1; $cut < strlen(self::STREAM); ++$cut) {
            $parts = [substr(self::STREAM, 0, $cut), substr(self::STREAM, $cut)];
            self::assertSame($whole, self::parse(...$parts), "cut at $cut");
        }
        self::assertSame($whole, self::parse(...str_split(self::STREAM)));
    }

    public function testCrlfAndCrLineEndsAndSeveralDataLines(): void
    {
        self::assertSame(
            [['event' => 'x', 'data' => "a\nb", 'id' => null], ['event' => '', 'data' => 'c', 'id' => null]],
            self::parse("event: x\r\ndata: a\r", "\ndata:b\r\n\r\n", "data: c\r\r\n"),
        );
    }

    public function testAnUnfinishedMessageWaitsForItsBlankLine(): void
    {
        $parser = new SseParser();

        self::assertSame([], $parser->feed("event: x\ndata: 1\n"));
        self::assertSame([['event' => 'x', 'data' => '1', 'id' => null]], $parser->feed("\n"));
    }
}
