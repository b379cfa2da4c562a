#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Laravel integration of the PHP client package (clients/php, namespace
# Chargeonce\Laravel) on real processes: a small Laravel application
# (clients/php/tests/Laravel/app) on Debian's Laravel, the database queue
# driver on SQLite, two `php artisan queue:work` workers at once, the
# `chargeonce:listen` event listener, and a real chargeonce-server started
# here with HTTP, the role tokens and short timers. First the package's
# Laravel unit tests (PHPUnit: middleware, trait, retry_after rule), then
# one scenario per guarantee, each checked against the server's history
# and the provider stub's count of calls (a line per call in
# provider.jsonl, written by the job):
#   1 a job that succeeds is charged once
#   2 a job that throws is not charged, and Laravel's retry does not run it
#   3 a worker killed with kill -9 mid-job: the lease and sweep release the
#     reservation, the redelivered job is deleted unrun, nothing charged,
#     the provider called once
#   4 one message delivered to both workers at once (a duplicated row, and
#     a row handed out again while it runs) runs once
#   5 a double dispatch of one button press (same request id) runs once
#   6 a cancel while queued deletes the job unrun
#   7 premium chats land on the priority queue
#   8 the delayed "you are in the queue" notice reaches the listener; the
#     listener, stopped and restarted, resumes after the last event id it
#     stored: the events in between once, none of before again
#   9 a job whose provider outcome is unknown is left uncertain, not charged
#  10 a user's cancel of a started job (text: cancel_after_start=request)
#     reaches the job's heartbeat: the job stops, nothing is charged
# Waits have generous bounds and print how long they took; nothing asserts
# a speed.
#
# usage: laravel.sh SERVER SOURCE_DIR   (needs php 8.2 with curl and
# pdo_sqlite, composer, phpunit, jq and Laravel 8 (php-laravel-framework),
# Debian's; fails, never skips, without them). The server runs on its own
# database in the CHARGEONCE_TEST_DSN cluster if that is set, else on an
# embedded cluster in the temp dir.
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 2)) || die "usage: laravel.sh SERVER SOURCE_DIR"
server_bin=$(realpath "$1")
src=$(realpath "$2")
started=$(now_us)

ok() { echo "laravel: ok: $*"; }

for tool in php composer phpunit jq; do
  command -v "$tool" >/dev/null || die "$tool is required (scripts/install-deps)"
done
php -r 'exit(PHP_VERSION_ID >= 80200 && extension_loaded("curl") && extension_loaded("pdo_sqlite") ? 0 : 1);' \
  || die "PHP 8.2 or newer with curl and pdo_sqlite is required (php-cli, php-curl, php-sqlite3)"
php -r '(@include "Illuminate/autoload.php") || exit(1);
  exit(version_compare(Illuminate\Foundation\Application::VERSION, "8.0", ">=") ? 0 : 1);' \
  || die "Laravel 8 or newer is required: Debian's php-laravel-framework (scripts/install-deps)"

# Under $PWD (ctest: the build dir), not /tmp: as root an embedded cluster
# runs as `postgres`, which must reach it.
tmp=$(mktemp -d "$PWD/laravel.XXXXXX")
chmod 755 "$tmp"
on_exit_remove "$tmp"

# -- the package ----------------------------------------------------------------

# A copy, as php.sh makes: dump-autoload writes vendor/ into it, and the
# application writes its storage/.
cp -r "$src/clients/php" "$tmp/package"
rm -rf "$tmp/package/vendor" "$tmp/package/tests/Laravel/app/storage"
export COMPOSER_HOME=$tmp/composer-home COMPOSER_DISABLE_NETWORK=1 \
  COMPOSER_ALLOW_SUPERUSER=1 COMPOSER_NO_INTERACTION=1
(cd "$tmp/package" && composer validate --no-check-publish --no-check-lock --strict \
  && composer dump-autoload --dev) >"$tmp/composer.log" 2>&1 \
  || die "composer: $(cat "$tmp/composer.log")"
ok "the package's autoloader builds offline; Laravel $(php -r 'require "Illuminate/autoload.php";
  echo Illuminate\Foundation\Application::VERSION;') from $(php -r 'echo stream_resolve_include_path("Illuminate/autoload.php");')"

suite_started=$(now_us)
status=0
(cd "$tmp/package" && phpunit --configuration tests/Laravel/phpunit.xml.dist --fail-on-skipped \
  --fail-on-risky --fail-on-warning --fail-on-incomplete --log-junit "$tmp/junit.xml") || status=$?
((status == 0)) || die "phpunit (tests/Laravel) exited $status (see above)"
read -r unit_tests unit_assertions <<<"$(sed -n \
  's/.*<testsuite name="laravel".* tests="\([0-9]*\)" assertions="\([0-9]*\)".*/\1 \2/p' \
  "$tmp/junit.xml" | head -n1)"
((${unit_tests:-0} > 0)) || die "the laravel unit suite did not run"
ok "unit: $unit_tests tests, $unit_assertions assertions in $(seconds_since "$suite_started") s"

# -- the server -----------------------------------------------------------------

token() { echo "$1-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
for role in gateway worker admin; do
  token "$role" >"$tmp/$role.token" # files: a command line is visible in ps
done
if [[ -n ${CHARGEONCE_TEST_DSN:-} ]]; then
  database=(--postgres="$CHARGEONCE_TEST_DSN")
else
  socket="$tmp/pg/socket/.s.PGSQL.5432"
  ((${#socket} <= 107)) || die "the working dir is too deep for a Unix socket: $socket"
  database=(--data-dir="$tmp/pg")
  on_exit_stop_postgres "$tmp/pg/data"
fi
# The application's config/chargeonce.php and config/queue.php are set to
# these timers: lease 3 s + sweep 1 s < retry_after 6 s.
lease_seconds=3 sweep_seconds=1 retry_after=6
start_server "$tmp/server" "${database[@]}" --port=0 --http-port=0 \
  --http-gateway-token-file="$tmp/gateway.token" \
  --http-worker-token-file="$tmp/worker.token" \
  --http-admin-token-file="$tmp/admin.token" \
  --queue-notice-delay=1s --lease-duration=${lease_seconds}s \
  --sweep-interval=${sweep_seconds}s --http-threads=16 --http-max-streams=8 \
  --text-cancel-after-start=request
port=$(port_of http)
[[ -n $port ]] || die "no http= line in the port file: $(cat "$server_port_file")"
echo "laravel: server pid $server_pid, HTTP on 127.0.0.1:$port" \
  "($(seconds_since "$started") s since the start)"

# -- the application ------------------------------------------------------------

app=$tmp/package/tests/Laravel/app
mkdir -p "$app/storage/framework/cache/data" "$app/storage/logs" "$app/bootstrap/cache" \
  "$tmp/records"
queue_db=$tmp/queue.sqlite
: >"$queue_db"
CHARGEONCE_URL=http://127.0.0.1:$port
CHARGEONCE_GATEWAY_TOKEN=$(<"$tmp/gateway.token")
CHARGEONCE_WORKER_TOKEN=$(<"$tmp/worker.token")
CHARGEONCE_ADMIN_TOKEN=$(<"$tmp/admin.token")
export CHARGEONCE_URL CHARGEONCE_GATEWAY_TOKEN CHARGEONCE_WORKER_TOKEN CHARGEONCE_ADMIN_TOKEN \
  CHARGEONCE_LEASE_DURATION=$lease_seconds CHARGEONCE_SWEEP_INTERVAL=$sweep_seconds \
  QUEUE_RETRY_AFTER=$retry_after DB_DATABASE=$queue_db TEST_RECORDS=$tmp/records
on_exit_show_log "$app/storage/logs/laravel.log" "$tmp/worker-*.log" "$tmp/listen*.log"

# artisan in the application, its output in $tmp/artisan.log too.
art() {
  (cd "$app" && php artisan "$@") 2> >(tee -a "$tmp/artisan.log" >&2)
}
art migrate --force >/dev/null || die "migrate failed"

# The service provider refuses a retry_after that is not longer than the
# lease plus the sweep interval: here 4 s, not longer than 3 s + 1 s.
if QUEUE_RETRY_AFTER=$((lease_seconds + sweep_seconds)) art demo:press 1 image x \
  >"$tmp/refused.log" 2>&1; then
  die "the application started with retry_after = lease + sweep: $(cat "$tmp/refused.log")"
fi
grep -q 'retry_after (4 s) must be longer' "$tmp/refused.log" \
  || die "no retry_after refusal in: $(head -c 600 "$tmp/refused.log")"
ok "the service provider refuses retry_after $((lease_seconds + sweep_seconds)) s" \
  "(lease $lease_seconds s + sweep $sweep_seconds s)"

queues=image_generation_priority,image_generation,text_generation_priority,text_generation
worker_pids=()
start_worker() {
  (cd "$app" && exec php artisan queue:work database --queue="$queues" --sleep=0.1 \
    --timeout=120 --tries=3) >"$tmp/worker-$1.log" 2>&1 &
  worker_pids+=("$!")
  on_exit_kill "$!"
}
start_worker 1
start_worker 2
(cd "$app" && exec php artisan chargeonce:listen) >"$tmp/listen.log" 2>&1 &
listener_pid=$!
on_exit_kill "$listener_pid"
echo "laravel: workers ${worker_pids[*]}, listener $listener_pid"

# -- checks ---------------------------------------------------------------------

# Lines of records file $1 (provider, drops, notices) for reservation $2, as
# a JSON array.
records() {
  local file=$tmp/records/$1.jsonl
  [[ -f $file ]] || { echo '[]'; return; }
  jq -cs --argjson r "$2" 'map(select(.reservation == $r))' "$file"
}
provider_calls() { records provider "$1" | jq length; }
drops() { records drops "$1" | jq length; }
# The server's view of chat $1 (demo:charges: history and status).
charges() { art demo:charges "$1"; }
commits() { charges "$1" | jq --arg r "$2" '.commits[$r] // [] | length'; }
ended() { charges "$1" | jq -r --arg r "$2" '.ended[$r] // "active"'; }
daily_images() { charges "$1" | jq .daily_images; }
daily_messages() { charges "$1" | jq .daily_messages; }
# One SQL statement on the queue's database: a SELECT prints its rows, any
# other statement how many rows it changed.
# shellcheck disable=SC2016 # PHP code, expanded by PHP
sql() {
  php -r '$db = new PDO("sqlite:" . $argv[1]); $db->setAttribute(PDO::ATTR_TIMEOUT, 30);
    $db->setAttribute(PDO::ATTR_ERRMODE, PDO::ERRMODE_EXCEPTION);
    if (!preg_match("/^\\s*SELECT/i", $argv[2])) { echo $db->exec($argv[2]), "\n"; exit; }
    foreach ($db->query($argv[2], PDO::FETCH_NUM) as $row) { echo implode(" ", $row), "\n"; }' "$queue_db" "$1"
}
queue_empty() { [[ $(sql 'SELECT count(*) FROM jobs') == 0 ]]; }
# Jobs dispatched with --delay=3600 stay queued until this makes them
# available: the test, not a clock, says when a worker may take them.
release_delayed() { sql 'UPDATE jobs SET available_at = 0 WHERE reserved_at IS NULL' >/dev/null; }
# A job of mode wait works (heartbeating) until this lets it finish.
finish() { : >"$tmp/records/finish-$1"; }
# The second delivery of reservation $1 is done with: run (a second
# provider call: a bug) or dropped.
second_delivery_handled() { [[ $(provider_calls "$1") -ge 2 || $(drops "$1") -ge 1 ]]; }
is_ended() { [[ $(ended "$1" "$2") == "$3" ]]; }
has_commits() { [[ $(commits "$1" "$2") -ge $3 ]]; }
has_drops() { [[ $(drops "$1") -ge $2 ]]; }
has_provider_calls() { [[ $(provider_calls "$1") -ge $2 ]]; }
has_notice() { [[ $(records notices "$1" | jq length) -ge 1 ]]; }

# expect WHAT GOT WANT
expect() {
  [[ $2 == "$3" ]] || die "$1: got '$2', expected '$3'"
}

# press CHAT RID [options]: the gateway's reserve and dispatch of a job of
# kind $kind; sets `reservation` and `queue`.
kind=image
press() {
  local chat=$1 rid=$2 out
  shift 2
  out=$(art demo:press "$chat" "$kind" "$rid" "$@") || die "demo:press $chat $rid: $out"
  [[ $out =~ reservation=([0-9]+)\ queue=([a-z_]+) ]] || die "demo:press said: $out"
  reservation=${BASH_REMATCH[1]} queue=${BASH_REMATCH[2]}
}

new_chat() {
  chat=$(random_chat)
  art demo:chat "$chat" --images=10 "$@" >/dev/null || die "demo:chat $chat failed"
}

# -- 1: success is charged once ---------------------------------------------------

die_where="in scenario 1 (success)"
new_chat
press "$chat" s1
poll 60 has_commits "$chat" "$reservation" 1 || die "reservation $reservation was not committed"
took=$poll_seconds
poll 60 queue_empty || die "the job is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "commits" "$(commits "$chat" "$reservation")" 1
expect "daily images left" "$(daily_images "$chat")" 9
expect "queue of a free chat's job" \
  "$(records provider "$reservation" | jq -r '.[0].queue')" image_generation
ok "1 success: committed in $took s; provider called once, charged once (10 → 9 images)," \
  "on image_generation"
free_chat=$chat

# -- 2: a job that throws is not charged -------------------------------------------

die_where="in scenario 2 (throws)"
new_chat
press "$chat" s2 --mode=throw
poll 60 is_ended "$chat" "$reservation" failed || die "reservation $reservation did not fail"
took=$poll_seconds
# Laravel retries a job that threw ($tries = 3): the retry finds the
# reservation failed and is deleted unrun.
poll 60 has_drops "$reservation" 1 || die "Laravel's retry of the job was not dropped"
poll 60 queue_empty || die "the job is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "commits" "$(commits "$chat" "$reservation")" 0
expect "daily images left" "$(daily_images "$chat")" 10
ok "2 throws: failed in $took s; provider called once, nothing charged; Laravel's retry" \
  "deleted unrun ($(records drops "$reservation" | jq -r '[.[].reason] | join(",")'))"

# -- 3: kill -9 mid-job -------------------------------------------------------------

die_where="in scenario 3 (kill -9)"
new_chat
press "$chat" s3 --mode=hang
poll 60 has_provider_calls "$reservation" 1 || die "the job never reached the provider"
victim=$(records provider "$reservation" | jq '.[0].pid')
is_child "$victim" || die "the job ran in pid $victim, which is not one of the workers (${worker_pids[*]})"
kill -KILL "$victim"
killed=$(now_us)
{ wait "$victim"; } 2>/dev/null || true
start_worker 3 # two workers again for what follows
poll 60 is_ended "$chat" "$reservation" released || die "reservation $reservation was not released"
released_after=$(seconds_since "$killed")
# The redelivery comes retry_after after the kill's delivery began, and
# is deleted, run or not.
poll 60 queue_empty || die "the job is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
redelivered_after=$(seconds_since "$killed")
expect "provider calls" "$(provider_calls "$reservation")" 1
poll 60 has_drops "$reservation" 1 || die "the redelivered job was not dropped"
expect "commits" "$(commits "$chat" "$reservation")" 0
expect "daily images left" "$(daily_images "$chat")" 10
reason=$(records drops "$reservation" | jq -r '.[0].reason')
case $reason in
  expired) ;;
  # The redelivery came before the sweep (a machine too loaded for the
  # timers): still deleted unrun, and the sweep released it.
  already_started) echo "laravel: note: the redelivery came before the release" ;;
  *) die "the redelivered job was dropped for '$reason', expected expired" ;;
esac
ok "3 kill -9: worker $victim killed mid-job; released by the lease and sweep after" \
  "$released_after s, the redelivery deleted unrun ($reason) after $redelivered_after s;" \
  "provider called once, nothing charged"

# -- 4: one message delivered to both workers at once -------------------------------

die_where="in scenario 4 (a message delivered twice)"
new_chat
# Two rows of one message (the same payload, job uuid included), made
# available at once: each idle worker takes one. The copy that runs waits
# for finish, so the other is handled while it runs.
press "$chat" s4 --mode=wait --delay=3600
expect "rows copied" "$(sql "INSERT INTO jobs (queue, payload, attempts, reserved_at, available_at,
  created_at) SELECT queue, payload, 0, NULL, available_at, created_at FROM jobs")" 1
release_delayed
poll 60 has_provider_calls "$reservation" 1 || die "no copy reached the provider"
poll 60 second_delivery_handled "$reservation" || die "the second copy was not handled"
took=$poll_seconds
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "why the second copy was deleted" "$(records drops "$reservation" | jq -r '.[0].reason')" \
  already_started
finish "$reservation"
poll 60 has_commits "$chat" "$reservation" 1 || die "reservation $reservation was not committed"
poll 60 queue_empty || die "a copy is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "commits" "$(commits "$chat" "$reservation")" 1
expect "daily images left" "$(daily_images "$chat")" 9
ran=$(records provider "$reservation" | jq '.[0].pid')
dropped=$(records drops "$reservation" | jq '.[0].pid')
[[ $ran != "$dropped" ]] || die "both copies went to worker $ran, not one to each"
ok "4a one message in two rows: ran in worker $ran, the other copy deleted unrun in worker" \
  "$dropped (already_started) $took s later; provider called once, charged once"

new_chat
press "$chat" s4b --mode=wait
poll 60 has_provider_calls "$reservation" 1 || die "the job never reached the provider"
# Handed out again while it runs: what a queue whose visibility timeout
# passed, or a broker's at-least-once delivery, does.
expect "rows handed out again" "$(sql 'UPDATE jobs SET reserved_at = NULL')" 1
poll 60 second_delivery_handled "$reservation" || die "the second delivery was not handled"
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "why the second delivery was deleted" "$(records drops "$reservation" | jq -r '.[0].reason')" \
  already_started
finish "$reservation"
poll 60 has_commits "$chat" "$reservation" 1 || die "reservation $reservation was not committed"
poll 60 queue_empty || die "the job is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "commits" "$(commits "$chat" "$reservation")" 1
ran=$(records provider "$reservation" | jq '.[0].pid')
dropped=$(records drops "$reservation" | jq '.[0].pid')
[[ $ran != "$dropped" ]] || die "both deliveries went to worker $ran"
ok "4b one row handed out again mid-run: ran in worker $ran, deleted unrun in worker $dropped" \
  "(already_started); provider called once, charged once"

# -- 5: a double dispatch of one button press -----------------------------------------

die_where="in scenario 5 (double dispatch)"
new_chat
press "$chat" s5 --mode=wait
first=$reservation
press "$chat" s5 --mode=wait
expect "the second press's reservation" "$reservation" "$first"
poll 60 has_provider_calls "$reservation" 1 || die "no job reached the provider"
poll 60 second_delivery_handled "$reservation" || die "the second job was not handled"
expect "provider calls" "$(provider_calls "$reservation")" 1
finish "$reservation"
poll 60 has_commits "$chat" "$reservation" 1 || die "reservation $reservation was not committed"
poll 60 queue_empty || die "a job is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "commits" "$(commits "$chat" "$reservation")" 1
expect "daily images left" "$(daily_images "$chat")" 9
ok "5 two dispatches of one request id: one reservation, one run, the other job deleted" \
  "($(records drops "$reservation" | jq -r '.[0].reason')); provider called once, charged once"

# -- 6: cancel while queued ------------------------------------------------------------

die_where="in scenario 6 (cancel while queued)"
new_chat
press "$chat" s6 --delay=3600
art demo:cancel "$chat" s6 >/dev/null || die "demo:cancel failed"
release_delayed
poll 60 has_drops "$reservation" 1 || die "the cancelled job was not dropped"
took=$poll_seconds
poll 60 queue_empty || die "the job is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
expect "provider calls" "$(provider_calls "$reservation")" 0
expect "commits" "$(commits "$chat" "$reservation")" 0
expect "how it ended" "$(ended "$chat" "$reservation")" cancelled
expect "daily images left" "$(daily_images "$chat")" 10
ok "6 cancel while queued: the job deleted unrun $took s after it became available" \
  "($(records drops "$reservation" | jq -r '.[0].reason')); provider never called, nothing charged"

# -- 7: premium chats on the priority queue ----------------------------------------------

die_where="in scenario 7 (premium)"
new_chat --premium
press "$chat" s7
expect "the queue of a premium chat's reservation" "$queue" image_generation_priority
poll 60 has_commits "$chat" "$reservation" 1 || die "reservation $reservation was not committed"
expect "the queue the job ran on" "$(records provider "$reservation" | jq -r '.[0].queue')" \
  image_generation_priority
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "commits" "$(commits "$chat" "$reservation")" 1
ok "7 premium: reserved and run on image_generation_priority (a free chat's: image_generation," \
  "chat $free_chat), charged once"

# -- 8: the queue notice ------------------------------------------------------------------

die_where="in scenario 8 (queue notice)"
new_chat
# Queued until the notice came (the server's queue-notice-delay is 1 s).
press "$chat" s8 --delay=3600
poll 60 has_notice "$reservation" || die "no queue notice for reservation $reservation"
took=$poll_seconds
release_delayed
poll 60 has_commits "$chat" "$reservation" 1 || die "reservation $reservation was not committed"
ok "8 queue notice: the listener's QueueNotice listener got it $took s after the press"
# Stopped here; scenarios 9 and 10 publish durable events while it is down.
stop_process "$listener_pid"

# -- 9: outcome unknown ----------------------------------------------------------------------

die_where="in scenario 9 (uncertain)"
new_chat
press "$chat" s9 --mode=uncertain
poll 60 is_ended "$chat" "$reservation" outcome_unknown \
  || die "reservation $reservation is not outcome_unknown: $(charges "$chat")"
poll 60 queue_empty || die "the job is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "commits" "$(commits "$chat" "$reservation")" 0
ok "9 uncertain: outcome_unknown, hold kept for a reconciler, nothing committed"
uncertain_reservation=$reservation

# -- 10: cancel after start ------------------------------------------------------------------

die_where="in scenario 10 (cancel after start)"
new_chat
kind=text
press "$chat" s10 --mode=hang
kind=image
poll 60 has_provider_calls "$reservation" 1 || die "the job never reached the provider"
art demo:cancel "$chat" s10 >/dev/null || die "demo:cancel failed"
poll 60 is_ended "$chat" "$reservation" failed || die "reservation $reservation was not failed"
took=$poll_seconds
poll 60 queue_empty || die "the job is still queued: $(sql 'SELECT id, queue, attempts FROM jobs')"
expect "provider calls" "$(provider_calls "$reservation")" 1
expect "commits" "$(commits "$chat" "$reservation")" 0
expect "why the job was deleted" "$(records drops "$reservation" | jq -r '.[0].reason')" cancel_requested
expect "daily messages left" "$(daily_messages "$chat")" 10
ok "10 cancel after start: the job's heartbeat saw the request, the reservation failed" \
  "$took s after the cancel, the job deleted; nothing charged"

# -- 8b: the listener resumes after the id it stored ------------------------------------------

die_where="in scenario 8b (the listener resumes)"
cursor=$( (cd "$app" && exec php artisan chargeonce:listen --seconds=3) 2>&1 | head -n1)
[[ $cursor =~ listening\ after\ event\ ([0-9]+) ]] \
  || die "the listener stored no event id to resume after: $cursor"
cursor=${BASH_REMATCH[1]}
events() { jq -cs "$1" "$tmp/records/events.jsonl"; }
expect "reconcile_needed of scenario 9's job after the restart" \
  "$(events "map(select(.event == \"reconcile_needed\" and .reservation == $uncertain_reservation
    and .event_id > $cursor)) | length")" 1
expect "cancel_requested of scenario 10's job after the restart" \
  "$(events "map(select(.event == \"cancel_requested\" and .reservation == $reservation
    and .event_id > $cursor)) | length")" 1
expect "durable events handled twice" \
  "$(events 'map(select(.event_id != null)) | group_by(.event_id) | map(select(length > 1)) | length')" 0
ok "8b the restarted listener resumed after event $cursor: the events published while it" \
  "was down once, none of before again"

die_where=""
for pid in "${worker_pids[@]}"; do
  stop_process "$pid"
done
failed_jobs=$(sql 'SELECT count(*) FROM failed_jobs')
echo "laravel: $failed_jobs job(s) in failed_jobs (scenario 2's exception, after its retry was dropped: 0 expected)"
stop_server "$server_pid"
echo "laravel: all passed in $(seconds_since "$started") s"
