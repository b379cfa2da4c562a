<?php
// SPDX-License-Identifier: Apache-2.0
// A worker loop in plain PHP: reads jobs from stdin, one
// "CHAT RESERVATION [fail]" per line (your own queue stands in here), and
// for each: start, heartbeat while working, then commit on success or fail
// on failure. A heartbeat that answers cancel_requested (the user cancelled
// a kind whose cancel_after_start is "request") makes it stop and fail the
// job. One JSON line per job.
//
//   CHARGEONCE_URL=http://127.0.0.1:8080 CHARGEONCE_TOKEN=<worker token> \
//     php examples/php/worker.php < jobs.txt

declare(strict_types=1);
require __DIR__ . '/chargeonce.php';

function work(Chargeonce $api, string $chat, string $id, bool $succeeds): array
{
    $path = "/v1/chats/$chat/reservations/$id";
    [$status, $res] = $api->call('POST', "$path/start");
    if ($status === 404 || $status === 410) { // gone, or swept: drop the job
        return ['job' => (int) $id, 'dropped' => $res['error']];
    }
    if ($status !== 200) {
        return ['job' => (int) $id, 'start' => $status] + $res;
    }
    for ($i = 0; $i < 3; ++$i) { // the real work goes here; heartbeats keep the lease
        usleep(100000);
        [$status, $res] = $api->call('POST', "$path/heartbeat");
        if ($status === 410) { // fenced off: another job may own the chat now
            return ['job' => (int) $id, 'dropped' => 'expired'];
        }
        if ($status === 200 && ($res['cancel_requested'] ?? false)) {
            [$status] = $api->call('POST', "$path/fail");
            return ['job' => (int) $id, 'aborted' => 'cancel_requested',
                    'failed' => $status === 200];
        }
    }
    if (!$succeeds) {
        [$status, $res] = $api->call('POST', "$path/fail");
        return ['job' => (int) $id, 'failed' => $status === 200,
                'held' => $res['held'] ?? null];
    }
    for (;;) { // commit is idempotent: retry until it answers
        [$status, $res] = $api->call('POST', "$path/commit");
        if ($status !== 503 && $status !== 0) {
            return ['job' => (int) $id, 'committed' => $status === 200] + $res;
        }
        sleep(1);
    }
}

$api = new Chargeonce();
while (($line = fgets(STDIN)) !== false) {
    $fields = preg_split('/\s+/', trim($line));
    if (count($fields) < 2) {
        continue;
    }
    say(work($api, $fields[0], $fields[1], !in_array('fail', $fields, true)));
}
