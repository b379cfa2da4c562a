<?php
// SPDX-License-Identifier: Apache-2.0
// A bot gateway's billing middleware in plain PHP: for one user update,
// touch the chat, reserve the job's price with a request id derived from
// the user's intent (the message and the button, never the update id: a
// platform's redelivery and a double tap must name the same job), and tell
// the user "your job is queued" when the queue notice arrives.
//
//   CHARGEONCE_URL=http://127.0.0.1:8080 CHARGEONCE_TOKEN=<gateway token> \
//     php examples/php/gateway.php CHAT KIND MESSAGE_ID BUTTON
//
// One JSON line per step; exit 0 when the job is queued and noticed (or
// refused with an answer for the user), 1 on anything else.

declare(strict_types=1);
require __DIR__ . '/chargeonce.php';

/** The job the user asked for: this message's button, whatever the update. */
function request_id_for(int $message_id, string $button): string
{
    return "msg-$message_id-$button";
}

function bill_update(Chargeonce $api, int $chat, string $kind, int $message_id,
                     string $button): int
{
    $events = $api->events(); // subscribed before the reserve: no notice is missed
    if ($events->next(10) !== 'subscribed') {
        say(['step' => 'subscribe', 'error' => 'no event stream']);
        return 1;
    }
    [$status, $state] = $api->call('POST', "/v1/chats/$chat/touch");
    if ($status !== 200) {
        say(['step' => 'touch', 'status' => $status] + $state);
        return 1;
    }
    [$status, $res] = $api->call('POST', "/v1/chats/$chat/reservations", [
        'kind' => $kind,
        'request_id' => request_id_for($message_id, $button),
    ]);
    if ($status === 402) { // insufficient_messages / insufficient_images
        say(['step' => 'reserve', 'reply' => 'out of credits'] + $res);
        return 0;
    }
    if ($status === 409) { // busy: the chat's jobs are all running
        say(['step' => 'reserve', 'reply' => 'one job at a time'] + $res);
        return 0;
    }
    if ($status !== 200) { // 503 or no answer: retry later, same request id
        say(['step' => 'reserve', 'status' => $status] + $res);
        return 1;
    }
    say(['step' => 'reserve', 'reservation' => $res['id'], 'queue' => $res['queue'],
         'held' => $res['held'], 'request_id' => $res['request_id']]);
    $until = microtime(true) + 30;
    while (microtime(true) < $until) { // events of every chat arrive: pick ours
        $event = $events->next($until - microtime(true));
        if (is_array($event) && ($event['event'] ?? '') === 'queue_notice'
            && ($event['reservation'] ?? 0) === $res['id']) {
            say(['step' => 'notice', 'reply' => 'your job is queued',
                 'reservation' => $res['id']]);
            return 0;
        }
    }
    say(['step' => 'notice', 'error' => 'no queue notice in 30 s']);
    return 1;
}

exit(bill_update(new Chargeonce(), (int) $argv[1], $argv[2], (int) $argv[3],
                 $argv[4]));
