<?php
// SPDX-License-Identifier: Apache-2.0
// A bot gateway's billing middleware in plain PHP, with the client package
// (clients/php): for one user update, touch the chat, reserve the job's
// price with a request id derived from the user's intent (the message and
// the button, never the update id: a platform's redelivery and a double tap
// must name the same job), hand the reservation to the queue, and tell the
// user "your job is queued" when the queue notice arrives.
//
//   CHARGEONCE_URL=http://127.0.0.1:8080 CHARGEONCE_TOKEN=<gateway token> \
//     php examples/php/gateway.php CHAT KIND MESSAGE_ID BUTTON
//
// One JSON line per step; exit 0 when the job is queued and noticed (or
// refused with an answer for the user), 1 on anything else.

declare(strict_types=1);
require __DIR__ . '/bootstrap.php';

use Chargeonce\Client;
use Chargeonce\Exception\BusyException;
use Chargeonce\Exception\ChargeonceException;
use Chargeonce\Exception\InsufficientFundsException;
use Chargeonce\Exception\InsufficientImagesException;
use Chargeonce\Exception\InsufficientMessagesException;

/** The job the user asked for: this message's button, whatever the update. */
function request_id_for(int $message_id, string $button): string
{
    return "msg-$message_id-$button";
}

function bill_update(Client $billing, int $chat, string $kind, int $message_id,
                     string $button): int
{
    try {
        // Returns once subscribed, before the reserve: no notice is missed.
        $events = $billing->events();
    } catch (ChargeonceException) {
        say(['step' => 'subscribe', 'error' => 'no event stream']);
        return 1;
    }
    try {
        $billing->touch($chat);
    } catch (ChargeonceException $e) {
        say(['step' => 'touch', 'status' => $e->status] + error_fields($e));
        return 1;
    }
    try {
        // After a lost answer or a 503 the client sends it again with the
        // same request id: the retry finds the job the first try made.
        $job = $billing->reserve($chat, $kind, requestId: request_id_for($message_id, $button));
    } catch (InsufficientMessagesException | InsufficientImagesException
             | InsufficientFundsException $e) {
        say(['step' => 'reserve', 'reply' => 'out of credits'] + error_fields($e));
        return 0;
    } catch (BusyException $e) { // the chat's jobs are all running
        say(['step' => 'reserve', 'reply' => 'one job at a time'] + error_fields($e));
        return 0;
    } catch (ChargeonceException $e) { // no answer even after retries: retry later, same request id
        say(['step' => 'reserve', 'status' => $e->status] + error_fields($e));
        return 1;
    }
    // The hand-off: your queue gets ['chat' => $job->chat, 'reservation' =>
    // $job->id] on $job->queue (the queue the chat's plan chose); here the
    // line below is the message, and examples/php/worker.php reads it.
    say(['step' => 'reserve', 'reservation' => $job->id, 'queue' => $job->queue,
         'held' => $job->held->all, 'request_id' => $job->request_id]);
    $until = microtime(true) + 30;
    try {
        while (($left = $until - microtime(true)) > 0) { // events of every chat arrive: pick ours
            $event = $events->next($left);
            if ($event !== null && $event->event === 'queue_notice'
                && $event->reservation === $job->id) {
                say(['step' => 'notice', 'reply' => 'your job is queued',
                     'reservation' => $job->id]);
                return 0;
            }
        }
    } catch (ChargeonceException $e) { // the stream ended (the server went away)
        say(['step' => 'notice'] + error_fields($e));
        return 1;
    } finally {
        $events->close();
    }
    say(['step' => 'notice', 'error' => 'no queue notice in 30 s']);
    return 1;
}

$billing = new Client(chargeonce_url(), gatewayToken: getenv('CHARGEONCE_TOKEN') ?: null);
exit(bill_update($billing, (int) $argv[1], $argv[2], (int) $argv[3], $argv[4]));
