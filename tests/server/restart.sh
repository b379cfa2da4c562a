#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Crash-restart test of the sweeper, leases, fencing and the event stream,
# against real chargeonce-server processes and the Postgres of
# CHARGEONCE_TEST_DSN (set by scripts/test).
#
# usage: restart.sh CHARGEONCE-SERVER CHARGEONCE-CLI
#
# Story: server A holds two reservations (X queued, Y started with a 2 s
# lease) and is killed with SIGKILL. Server B, started on the same database,
# must still see both (the locks live in Postgres, not in memory), then
# release them by itself (Y: lease_expired, X: sweep_timeout) and publish
# reservation_released; afterwards every late start/heartbeat/commit of the
# released reservations answers `expired` and charges nothing. Then an
# event outlives its server: B releases Z while no gateway listens and is
# killed; server C delivers that release to `watch --after=<last id>`.
#
# Under ctest the database is the test's own (own_database.sh), but run by
# hand it may be shared: chats get random 12-digit ids, and events of other
# chats in the watch output are ignored.
# The temp dir is made under $PWD (ctest: the build dir).
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 2)) || die "usage: restart.sh CHARGEONCE-SERVER CHARGEONCE-CLI"
server_bin=$(realpath "$1")
cli=$(realpath "$2")
[[ -x $server_bin ]] || die "not an executable: $server_bin"
[[ -x $cli ]] || die "not an executable: $cli"
command -v jq >/dev/null || die "jq is required (apt-get install jq)"
command -v psql >/dev/null || die "psql is required (apt-get install postgresql-client)"
# Never pass vacuously: without a database nothing here can be tested.
[[ -n ${CHARGEONCE_TEST_DSN:-} ]] \
  || die "CHARGEONCE_TEST_DSN is not set (a libpq DSN of a" \
    "throwaway database; scripts/test sets it)"
dsn=$CHARGEONCE_TEST_DSN

# The timings every server of this test runs with: sweep often, release a
# reservation 30 s after reserve, or 2 s after its last heartbeat. X must
# still be held when server B looks at it (about 1 s after reserve X on a
# quiet machine, 2.5 s beside a CPU hog at a load of 7) and Y's lease must
# outlast the few ms from its heartbeat to the kill of server A: each timer
# is over 10x what it must outlast.
server_options=(--postgres="$dsn" --sweep-interval=500ms
  --max-job-duration=2s --sweep-timeout=30s --lease-duration=2s
  --queue-notice-delay=300ms)

tmp=$(mktemp -d "$PWD/restart.XXXXXX")
on_exit_remove "$tmp"
on_exit_show_log "$tmp/*.log" "$tmp/*.out" "$tmp/*.err"
# Every background process we start, by role (the EXIT trap ends what still
# runs).
server_a="" server_b="" watch_a="" watch_b=""
current_step="setup"

# -- helpers ------------------------------------------------------------------

step() {
  current_step=${1%%:*}
  die_where="in step $current_step"
  printf '\n== step %s\n' "$1"
}

note() {
  echo "   $*"
}

now_ms() {
  echo $(($(date +%s%N) / 1000000))
}

# -- servers and the CLI ------------------------------------------------------

# Starts `chargeonce-cli watch` against `port` in the background, writing to
# $tmp/`name`.out; sets `started_pid` once it is subscribed (it says so on
# stderr), so that no later event can be missed. Extra arguments go to the
# watch (--after=ID).
start_watch() {
  local name=$1 port=$2
  shift 2
  "$cli" --server="127.0.0.1:$port" --timeout="$cli_timeout" watch "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  started_pid=$!
  on_exit_kill "$started_pid"
  poll 60 watching "$name" \
    || die "watch $name did not subscribe within 60 s"
  note "watch $name subscribed after $poll_seconds s"
}

# True once watch `name` (started_pid) says it is subscribed; dies if it
# exited.
watching() {
  grep -q '^chargeonce-cli: watching' "$tmp/$1.err" && return 0
  alive "$started_pid" && return 1
  reap "$started_pid"
  die "watch $1 exited $status before subscribing: $(cat "$tmp/$1.err")"
}

# Runs the CLI against `port`, expecting exit status `want_rc`; its stdout
# (one JSON object) goes to the global `out`.
cli_expect() {
  local want_rc=$1 port=$2 rc=0
  shift 2
  out=$("$cli" --server="127.0.0.1:$port" --timeout="$cli_timeout" "$@" \
    2>"$tmp/cli.err") || rc=$?
  ((rc == want_rc)) || die "'chargeonce-cli $*' exited $rc, expected" \
    "$want_rc: $out $(cat "$tmp/cli.err")"
  jq -e 'type == "object"' <<<"$out" >/dev/null 2>&1 \
    || die "'chargeonce-cli $*' did not print one JSON object: $out"
}

# True if the last CLI output satisfies the jq filter (extra args go to jq).
out_is() {
  jq -e "$@" <<<"$out" >/dev/null
}

# Like out_is, or fails with `message` and the output.
expect_out() {
  local message=$1
  shift
  out_is "$@" || die "$message: $out"
}

# The events in watch file `name` matching jq filter `select`, compact, one
# a line. Lines are parsed one by one: a line still being written is skipped.
events() {
  jq -c -R "fromjson? // empty | select($2)" "$tmp/$1.out"
}

# True if watch file `name` has an event matching `select`.
has_event() {
  [[ -n $(events "$1" "$2") ]]
}

# For a failure message: did server B log releasing reservation `id`? If
# not, something else swept it (another server on the same database?).
who_released() {
  if grep -q "reservation released chat=[-0-9]* reservation=$1 " \
    "$tmp/b.log"; then
    echo "server B logged releasing it, yet did not publish it"
  else
    echo "server B did not release it: another process sweeping the" \
      "same database?"
  fi
}

# True if chat `chat` has no active reservation on `port`.
chat_unlocked() {
  cli_expect 0 "$1" status --chat="$2"
  out_is '.reservation == null'
}

# -- what a failure shows ----------------------------------------------------

# What the EXIT trap shows on failure of a log or watch file (instead of
# lib.sh's last 40 lines): what it says about our chats (a shared database
# makes the servers sweep, and the watches print, other chats too),
# then its last lines.
show_log() {
  local f=$1
  if [[ -n ${chat_x:-} && -n ${chat_y:-} ]]; then
    echo "--- ${f##*/}: lines about chats $chat_x and $chat_y ---"
    grep -E "chat\"?[=:]($chat_x|$chat_y)\b" "$f" || true
  fi
  echo "--- ${f##*/}: last 10 lines ---"
  tail -n 10 "$f"
}

trap 'echo "restart: interrupted in step $current_step" >&2; exit 130' INT
trap 'echo "restart: interrupted in step $current_step" >&2; exit 143' TERM

# -- 1. the configuration check -----------------------------------------------

step "1: sweep-timeout below 2 x max-job-duration is refused"
# A sweep-timeout shorter than two jobs would unlock a chat whose job still
# runs; the server must refuse before touching the database.
rc=0
timeout 30 "$server_bin" --postgres="$dsn" --max-job-duration=2s \
  --sweep-timeout=3s >"$tmp/refused.out" 2>"$tmp/refused.err" || rc=$?
((rc == 2)) || die "the server exited $rc, expected 2:" \
  "$(cat "$tmp/refused.err")"
grep -q 'sweep-timeout' "$tmp/refused.err" \
  || die "stderr does not mention sweep-timeout: $(cat "$tmp/refused.err")"
note "exit 2: $(cat "$tmp/refused.err")"

# -- 2. server A holds two reservations ---------------------------------------

step "2: server A, two reservations, queue notices"
chat_x=$(random_chat)
chat_y=$(random_chat)
while ((chat_y == chat_x)); do chat_y=$(random_chat); done
note "chat X=$chat_x, chat Y=$chat_y"

start_server "$tmp/a" "${server_options[@]}" --port=0
server_a=$server_pid port_a=$server_port
note "server A pid $server_a on port $port_a"
start_watch watch_a "$port_a"
watch_a=$started_pid

for chat in "$chat_x" "$chat_y"; do
  cli_expect 0 "$port_a" create-chat --chat="$chat" --balance=5
  expect_out "create-chat $chat" '.balance == 5 and .reservation == null'
done

cli_expect 0 "$port_a" reserve --chat="$chat_y" --kind=image
ry=$(jq .id <<<"$out")
cli_expect 0 "$port_a" start --chat="$chat_y" --reservation="$ry"
expect_out "start Y" '.status == "in_progress" and .lease_expires_at == null'
# X last, so that little happens between its reserve and server B's look
# at it. Taken before the request: the notice's delay counts from the
# server's reserve, which comes later.
reserved_at=$(now_ms)
cli_expect 0 "$port_a" reserve --chat="$chat_x" --kind=image
rx=$(jq .id <<<"$out")
expect_out "reserve X" '.status == "queued" and .held.balance == 1'
note "reserved ry=$ry (Y, in_progress) and rx=$rx (X, queued)"

# Both are still active after queue-notice-delay (started counts as active).
notice_x="(.event == \"queue_notice\" and .chat == $chat_x"
notice_x+=" and .reservation == $rx)"
notice_y="(.event == \"queue_notice\" and .chat == $chat_y"
notice_y+=" and .reservation == $ry)"
poll 60 has_event watch_a "$notice_x" \
  || die "no queue_notice for X (rx=$rx) within 60 s"
poll 60 has_event watch_a "$notice_y" \
  || die "no queue_notice for Y (ry=$ry) within 60 s"
notice_ms=$(($(now_ms) - reserved_at))
note "queue_notice for X and Y seen ${notice_ms} ms after reserve X"
# Published queue-notice-delay (300 ms) after the reserve, not at once: a
# lower bound, which a slow machine can only help to pass.
((notice_ms >= 250)) || die "queue_notice came after ${notice_ms} ms," \
  "before queue-notice-delay (300 ms)"

# Watch B will resume after the newest event id written so far, as a
# gateway that saw them all would: it gets B's releases however long B
# takes to start and the watch to subscribe (Y's lease may lapse meanwhile).
newest=$(psql "$dsn" -qAtc "SELECT last_id FROM event_clock") \
  || die "cannot read the newest event id"

# The heartbeat comes last, right before the kill: the 2 s lease then lapses
# only after A is dead, so it is B's sweeper that must release Y, however
# long the notices took.
cli_expect 0 "$port_a" heartbeat --chat="$chat_y" --reservation="$ry"
heartbeat_at=$(now_ms)

# -- 3. kill -9, restart: the locks are in Postgres ---------------------------

step "3: kill -9 server A, server B sees the reservations"
# Reaped in the same block: bash reports a job killed by a signal ("Killed")
# on stderr, which is noise here.
{
  kill -KILL "$server_a"
  reap "$server_a"
} 2>/dev/null
killed_at=$(now_ms)
((status == 137)) || die "server A exited $status, expected 137 (SIGKILL)"
server_a=""
note "server A killed $((killed_at - heartbeat_at)) ms after the heartbeat" \
  "of ry (lease until $(jq -r .lease_expires_at <<<"$out"))"
expect_out "heartbeat Y" '.lease_expires_at != null'
start_server "$tmp/b" "${server_options[@]}" --port=0
server_b=$server_pid port_b=$server_port
listening_ms=$(($(now_ms) - killed_at))
note "server B pid $server_b on port $port_b, listening ${listening_ms} ms" \
  "after the kill"

cli_expect 0 "$port_b" status --chat="$chat_x"
expect_out "X's reservation rx=$rx is gone after the restart" \
  ".reservation.id == $rx and .reservation.status == \"queued\""
cli_expect 1 "$port_b" reserve --chat="$chat_x" --kind=image
expect_out "a second reserve of X after the restart" '.error == "busy"'
checked_at=$(now_ms)
note "X still holds rx=$rx and refuses a reserve (busy), $((checked_at - killed_at))" \
  "ms after the kill, $((checked_at - reserved_at)) ms after its reserve"
start_watch watch_b "$port_b" --after="$newest"
watch_b=$started_pid
cli_expect 0 "$port_b" status --chat="$chat_y"
note "Y $(($(now_ms) - heartbeat_at)) ms after its heartbeat:" \
  "$(jq -c '.reservation | if . == null then null else {id, status} end' \
    <<<"$out")"

# The watch of A must notice its server vanished: exit 2, not hang.
wait_gone "$watch_a" 60 || die "watch A still runs 60 s after server A died"
reap "$watch_a"
watch_a=""
((status == 2)) \
  || die "watch A exited $status after server A died, expected 2"
has_event watch_a '.error == "connection"' \
  || die "watch A printed no {\"error\":\"connection\"} line"
note "watch A exited 2: $(tail -n1 "$tmp/watch_a.out")"

# -- 4. B's sweeper releases both ---------------------------------------------

step "4: server B releases Y (lease_expired) and X (sweep_timeout)"
released_y="(.event == \"reservation_released\" and .chat == $chat_y"
released_y+=" and .reservation == $ry)"
released_x="(.event == \"reservation_released\" and .chat == $chat_x"
released_x+=" and .reservation == $rx)"
# Each poll: the timer (lease, sweep-timeout) plus a liveness bound far
# above the sweep's own time (under a second).
poll 60 chat_unlocked "$port_b" "$chat_y" \
  || die "Y still holds a reservation 60 s after the restart: $out"
note "Y unlocked $(($(now_ms) - heartbeat_at)) ms after its heartbeat"
poll 60 chat_unlocked "$port_b" "$chat_x" \
  || die "X still holds a reservation 60 s after the restart: $out"
note "X unlocked $(($(now_ms) - reserved_at)) ms after its reserve"
# The event is published after the delete committed: allow it a moment.
poll 60 has_event watch_b "$released_y" \
  || die "watch B has no reservation_released for ry=$ry:" \
    "$(who_released "$ry")"
poll 60 has_event watch_b "$released_x" \
  || die "watch B has no reservation_released for rx=$rx:" \
    "$(who_released "$rx")"
note "both releases printed by watch B ($poll_seconds s after X's unlock)"
reason_y=$(events watch_b "$released_y" | jq -r .reason)
reason_x=$(events watch_b "$released_x" | jq -r .reason)
[[ $reason_y == lease_expired ]] \
  || die "ry=$ry released with reason '$reason_y', expected lease_expired"
[[ $reason_x == sweep_timeout ]] \
  || die "rx=$rx released with reason '$reason_x', expected sweep_timeout"
note "$(events watch_b "$released_y")"
note "$(events watch_b "$released_x")"

# -- 5. fencing ---------------------------------------------------------------

step "5: late operations on released reservations answer expired"
cli_expect 1 "$port_b" commit --chat="$chat_y" --reservation="$ry"
expect_out "late commit of ry" '.error == "expired"'
note "commit ry: $out"
cli_expect 1 "$port_b" heartbeat --chat="$chat_y" --reservation="$ry"
expect_out "late heartbeat of ry" '.error == "expired"'
cli_expect 1 "$port_b" start --chat="$chat_x" --reservation="$rx"
expect_out "late start of rx" '.error == "expired"'
note "start rx: $out"
for chat in "$chat_x" "$chat_y"; do
  cli_expect 0 "$port_b" status --chat="$chat"
  expect_out "chat $chat was charged" '.balance == 5 and .reservation == null'
done
note "balances of X and Y still 5"

# X is free again; a commit of the old reservation must not touch the new.
cli_expect 0 "$port_b" reserve --chat="$chat_x" --kind=image
rx2=$(jq .id <<<"$out")
expect_out "reserve X again" ".id != $rx"
cli_expect 1 "$port_b" commit --chat="$chat_x" --reservation="$rx"
expect_out "late commit of rx" '.error == "expired"'
cli_expect 0 "$port_b" status --chat="$chat_x"
expect_out "the new reservation rx2=$rx2 after a late commit of rx" \
  ".balance == 5 and .reservation.id == $rx2
    and .reservation.status == \"queued\" and .reservation.held.balance == 1"
note "X reserved again (rx2=$rx2); late commit rx: expired; rx2 untouched"
# Leave nothing behind in a shared database: a later sweep (of this test
# or of another one) would release rx2 and publish it.
cli_expect 0 "$port_b" cancel --chat="$chat_x"
expect_out "cancel rx2" ".id == $rx2"

# Each release was published exactly once (B released them, not A).
for sel in "$released_x" "$released_y"; do
  n=$(events watch_b "$sel" | wc -l)
  ((n == 1)) || die "$n reservation_released events for $sel, expected 1"
done
! has_event watch_a '.event == "reservation_released" and
  (.chat == '"$chat_x"' or .chat == '"$chat_y"')' \
  || die "server A released a reservation before it was killed"

# -- 6. an event outlives the server that wrote it ----------------------------

# The gateway (watch B) stops, keeping the last event id it printed; server
# B releases Z and is killed with SIGKILL before anyone got that event. A
# new server on the same database, watched after that id, delivers it.
step "6: SIGTERM watch B, release Z, kill -9 server B before delivery"
last_id=$(events watch_b '.event_id != null' | jq -s 'map(.event_id) | max')
[[ $last_id =~ ^[0-9]+$ ]] \
  || die "watch B printed no event with an event_id: $(tail -n 3 \
    "$tmp/watch_b.out")"
kill -TERM "$watch_b"
wait_gone "$watch_b" 60 || die "watch B still runs 60 s after SIGTERM"
reap "$watch_b"
watch_b=""
((status == 0)) || die "watch B exited $status after SIGTERM, expected 0"
note "watch B exited 0; its last event id: $last_id"
chat_z=$(random_chat)
cli_expect 0 "$port_b" create-chat --chat="$chat_z" --balance=5
cli_expect 0 "$port_b" reserve --chat="$chat_z" --kind=image
rz=$(jq .id <<<"$out")
cli_expect 0 "$port_b" start --chat="$chat_z" --reservation="$rz"
cli_expect 0 "$port_b" heartbeat --chat="$chat_z" --reservation="$rz"
poll 60 chat_unlocked "$port_b" "$chat_z" \
  || die "Z still holds a reservation 60 s after its heartbeat: $out"
kill -KILL "$server_b"
wait_gone "$server_b" 60 || die "server B still runs 60 s after SIGKILL"
reap "$server_b"
server_b=""
note "Z (rz=$rz) released, server B killed"

step "7: server C, watch --after=$last_id delivers Z's release once"
start_server "$tmp/c" "${server_options[@]}" --port=0
server_c=$server_pid port_c=$server_port
"$cli" --server="127.0.0.1:$port_c" --timeout="$cli_timeout" \
  watch --after="$last_id" >"$tmp/watch_c.out" 2>"$tmp/watch_c.err" &
watch_c=$!
on_exit_kill "$watch_c"
released_z="(.event == \"reservation_released\" and .chat == $chat_z"
released_z+=" and .reservation == $rz)"
poll 60 has_event watch_c "$released_z" \
  || die "watch C --after=$last_id has no reservation_released for" \
    "rz=$rz: $(tail -n 3 "$tmp/watch_c.out") $(cat "$tmp/watch_c.err")"
note "delivered after $poll_seconds s"
# A duplicate would have come by now (a wait for something not to happen:
# a slow machine can only make it pass).
sleep 0.5
n=$(events watch_c "$released_z" | wc -l)
((n == 1)) || die "$n reservation_released events for rz=$rz, expected 1"
! has_event watch_c ".event_id != null and .event_id <= $last_id" \
  || die "watch C --after=$last_id printed an event at or before it"
note "$(events watch_c "$released_z")"

# -- 8. clean shutdown --------------------------------------------------------

# The watch goes first: once the server is gone it would exit 2 by design.
step "8: SIGTERM watch C, then server C"
kill -TERM "$watch_c"
wait_gone "$watch_c" 60 || die "watch C still runs 60 s after SIGTERM"
reap "$watch_c"
((status == 0)) || die "watch C exited $status after SIGTERM, expected 0"
note "watch C exited 0"
stop_at=$(now_ms)
stop_server "$server_c"
note "server C exited 0 after $(($(now_ms) - stop_at)) ms"

printf '\nrestart: all steps passed\n'
