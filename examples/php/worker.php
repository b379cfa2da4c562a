<?php
// SPDX-License-Identifier: Apache-2.0
// A worker loop in plain PHP, with the client package (clients/php): reads
// jobs from stdin, one "CHAT RESERVATION [fail]" per line (your own queue
// stands in here: a line is one delivery of a job), and for each: start it
// under a worker identity that names this delivery, heartbeat while
// working, then commit on success or fail on failure. A job that is gone,
// expired (released by the sweep) or already_started (another delivery of
// it runs) is dropped unrun. A heartbeat that answers cancel_requested (the
// user cancelled a kind whose cancel_after_start is "request") makes it
// stop and fail the job. One JSON line per job.
//
//   CHARGEONCE_URL=http://127.0.0.1:8080 CHARGEONCE_TOKEN=<worker token> \
//     php examples/php/worker.php < jobs.txt

declare(strict_types=1);
require __DIR__ . '/bootstrap.php';

use Chargeonce\Client;
use Chargeonce\Exception\AlreadyStartedException;
use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\ExpiredException;
use Chargeonce\Exception\NotFoundException;
use Chargeonce\Exception\TransientException;
use Chargeonce\Receipt;

function work(Client $billing, int $chat, int $id, string $worker, bool $succeeds): array
{
    try {
        $billing->start($chat, $id, worker: $worker);
    } catch (NotFoundException | ExpiredException | AlreadyStartedException $e) {
        return ['job' => $id, 'dropped' => $e->error]; // gone, swept, or run by another delivery
    } catch (ChargeonceException $e) {
        return ['job' => $id, 'start' => $e->status] + error_fields($e);
    }
    for ($i = 0; $i < 3; ++$i) { // the real work goes here; heartbeats keep the lease
        usleep(100000);
        try {
            $job = $billing->heartbeat($chat, $id, worker: $worker);
        } catch (ExpiredException | AlreadyStartedException $e) {
            return ['job' => $id, 'dropped' => $e->error]; // fenced off: drop the job
        } catch (ChargeonceException) {
            continue; // the next heartbeat or the commit will tell
        }
        if ($job->cancel_requested) {
            // The user cancelled: stop and release the hold (a worker whose
            // provider already did the work would commit instead).
            return ['job' => $id, 'aborted' => 'cancel_requested',
                    'failed' => fail_job($billing, $chat, $id, $worker)['failed']];
        }
    }
    if (!$succeeds) {
        return ['job' => $id] + fail_job($billing, $chat, $id, $worker);
    }
    for (;;) { // commit is idempotent (a retry answers the first receipt): retry until it answers
        try {
            $receipt = $billing->commit($chat, $id, worker: $worker);
            return ['job' => $id, 'committed' => true] + receipt_fields($receipt);
        } catch (TransientException) { // still no answer after the client's own retries
            sleep(1);
        } catch (ChargeonceException $e) {
            return ['job' => $id, 'committed' => false] + error_fields($e);
        }
    }
}

/** The job failed: the hold is released, nothing charged. */
function fail_job(Client $billing, int $chat, int $id, string $worker): array
{
    try {
        return ['failed' => true, 'held' => $billing->fail($chat, $id, worker: $worker)->held->all];
    } catch (ChargeonceException $e) {
        return ['failed' => false, 'held' => null] + error_fields($e);
    }
}

/** The receipt's fields as the API's JSON has them. */
function receipt_fields(Receipt $r): array
{
    return [
        'charged' => $r->charged->all,
        'chat' => $r->chat,
        'committed_at' => $r->committed_at->setTimezone(new DateTimeZone('UTC'))
            ->format('Y-m-d\TH:i:s.u\Z'),
        'kind' => $r->kind,
        'released' => $r->released->all,
        'reservation' => $r->reservation,
        'units' => $r->units,
        'window' => $r->window,
    ];
}

$billing = new Client(chargeonce_url(), workerToken: getenv('CHARGEONCE_TOKEN') ?: null);
$delivery = 0;
while (($line = fgets(STDIN)) !== false) {
    $fields = preg_split('/\s+/', trim($line));
    if (count($fields) < 2) {
        continue;
    }
    // The worker identity names this delivery (a queue's job id and attempt
    // would do): the same on every call and retry for it, another for a
    // second delivery of the same job, whose start is then already_started.
    $worker = sprintf('%s-%d-%d', gethostname() ?: 'worker', getmypid(), ++$delivery);
    say(work($billing, (int) $fields[0], (int) $fields[1], $worker, !in_array('fail', $fields, true)));
}
