<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace App;

/**
 * What the test script reads back: one JSON line per provider call
 * (provider.jsonl: the provider stub, one line per paid call that reached
 * it), per dropped delivery (drops.jsonl) and per queue notice
 * (notices.jsonl), appended under a lock by whichever worker process did it.
 */
final class Records
{
    /** @param array<string, mixed> $fields */
    public static function append(string $name, array $fields): void
    {
        $file = self::path("$name.jsonl");
        $line = json_encode($fields + ['pid' => getmypid(), 'at' => microtime(true)], JSON_THROW_ON_ERROR) . "\n";
        if (file_put_contents($file, $line, FILE_APPEND | LOCK_EX) !== strlen($line)) {
            throw new \RuntimeException("cannot append to $file");
        }
    }

    /** A file in the records' directory (TEST_RECORDS). */
    public static function path(string $name): string
    {
        $dir = getenv('TEST_RECORDS') ?: storage_path('records');
        if (!is_dir($dir)) {
            mkdir($dir, 0777, true);
        }
        return "$dir/$name";
    }
}
