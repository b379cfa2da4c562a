<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce\Exception;

/**
 * 503 storage_unavailable: Postgres did not answer; the operation may or may
 * not have been written: retry with the same ids.
 */
final class StorageUnavailableException extends ChargeonceException implements TransientException
{
    public const ERROR = 'storage_unavailable';
}
