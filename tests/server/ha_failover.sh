#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# chargeonce-server on a pg_auto_failover formation (scripts/ha-cluster):
# two failovers while clients top up and charge jobs lose no acknowledged
# operation and charge nothing twice.
#
# usage: ha_failover.sh HA-CLUSTER CHARGEONCE-SERVER CHARGEONCE-CLI
#
# Story: one server runs on the formation's multi-host connection string. A
# client loop tops up a chat (a payment id per credit) and runs image jobs
# (reserve with a request id, start, commit), each step retried with the
# same ids while it is unacknowledged (storage_unavailable, or no answer),
# as clients.md says, a bounded number of times. Meanwhile the primary's
# Postgres is killed (-9) twice. Afterwards, on the new primary: every
# acknowledged top-up and commit is in the ledger once, the balance is what
# the acknowledged operations say, /readyz was 503 while no primary was
# reachable, and the server counted its reconnects and its time without a
# primary. Prints the time each failover and each
# wait took, and how many tries each retried operation needed. Needs the
# packages postgresql-15-auto-failover and pg-auto-failover-cli; fails,
# never skips, without them.
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 3)) || die "usage: ha_failover.sh HA-CLUSTER SERVER CLI"
ha=$(realpath "$1")
server_bin=$(realpath "$2")
cli_bin=$(realpath "$3")
for x in "$ha" "$server_bin" "$cli_bin"; do
  [[ -x $x ]] || die "not an executable: $x"
done
for tool in psql jq curl pg_autoctl; do
  command -v "$tool" >/dev/null || die "$tool is required (scripts/install-deps)"
done
for var in $(compgen -e); do
  if [[ $var == PG* ]]; then unset "$var"; fi
done

tmp=$(mktemp -d "$PWD/ha_failover.XXXXXX")
chmod 755 "$tmp" # as root the formation runs as postgres
export HA_DIR=$tmp/ha
# ha-cluster's own liveness bounds (a formation ready, a promotion): 240 s,
# 20x the longest measured (see ha_cluster.sh), not its default 120 s.
export HA_TIMEOUT=240
# Ports above the ephemeral range (see ha_cluster.sh), apart from its runs.
read -r _ ephemeral_hi </proc/sys/net/ipv4/ip_local_port_range
if ((ephemeral_hi <= 64000)); then
  export HA_PORT_BASE=$((65533 - 3 - ($$ % ((65533 - ephemeral_hi) / 3 - 1)) * 3))
else
  export HA_PORT_BASE=$((20430 + ($$ % 500) * 3))
fi
on_exit_remove "$tmp"
stop_formation() { "$ha" stop >/dev/null 2>&1 || true; }
on_exit_run stop_formation
on_exit_show_log "$tmp/*.err" "$HA_DIR/*.log"

note() { echo "ha_failover: ok: $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# Milliseconds as seconds with one decimal.
seconds() { printf '%d.%d' $(($1 / 1000)) $((($1 % 1000) / 100)); }
# A list of errors, "a,a,b", as "2 a, 1 b".
tally() {
  tr ',' '\n' <<<"$1" | sort | uniq -c \
    | awk '{ printf "%s%d %s", (NR > 1 ? ", " : ""), $1, $2 }'
}

# Polls `command...` every 0.2 s until it succeeds and sets `waited_ms` to
# how long that took; fails once `seconds` have passed. A liveness bound
# only (something hangs), at least 10x what the wait takes on a quiet
# machine.
wait_until() {
  local seconds=$1 t0
  shift
  t0=$(now_ms)
  until "$@"; do
    (($(now_ms) - t0 < seconds * 1000)) || return 1
    sleep 0.2
  done
  waited_ms=$(($(now_ms) - t0))
}

# -- the formation and the server -------------------------------------------------

dsn=$("$ha" start 2>"$tmp/start.err" | tail -n1)
[[ $dsn == *target_session_attrs=read-write* ]] || die "ha-cluster start printed '$dsn'"
note "formation up: $dsn"

# The sweeper runs every second through the failovers, but releases no job
# of this test: with a max-job-duration of 10 min (sweep-timeout 30 min) a
# job whose retries a busy machine drags out is never `expired`, which would
# fail the test on a clock.
start_server "$tmp/server" --postgres="$dsn" --port=0 --http-port=0 \
  --sweep-interval=1s --store-timeout=3s --max-job-duration=10min
http=http://127.0.0.1:$(port_of http)
cli=("$cli_bin" --server=127.0.0.1:"$server_port" --timeout=10s)

# -- clients ------------------------------------------------------------------------

# What is not acknowledged is retried with the same ids up to tries_max
# times, with retry_pause between the tries: about 3 min in all, over 10x
# the longest time an operation went unacknowledged here on a machine busy
# with builds and tests (13 s at a load of 10).
tries_max=40

# The pause after try `n`: 0.1 s after the first, twice as long after each
# next, at most 5 s.
retry_pause() {
  sleep "$(awk -v n="$1" 'BEGIN { s = 0.1 * 2 ^ (n - 1); print s < 5 ? s : 5 }')"
}

# until_acknowledged ARGS...: the CLI call until it is acknowledged, the
# same ids every time. Unacknowledged, and retried: storage_unavailable
# (the server lost its primary: its connection failed or broke, also while
# a commit waited for the synchronous standby, or the node is read-only,
# SQLSTATE 25006; the outcome may be open) and `connection` (no
# answer from the server within --timeout). Any other answer fails at
# once, and so does the last of tries_max tries. With `acked_on_retry` set
# to an error name, that answer to a retry means an earlier try was
# acknowledged after all (create-chat: already_exists). Prints the answer;
# a retried call is written down in $retries as "command key tries ms
# errors" (its key: the last argument).
retries=$tmp/retries
until_acknowledged() {
  local out rc error errors='' tries=0 t0
  t0=$(now_ms)
  while :; do
    tries=$((tries + 1)) rc=0
    out=$("${cli[@]}" "$@" 2>/dev/null) || rc=$?
    ((rc == 0)) && break
    error=$(jq -r .error <<<"$out" 2>/dev/null) || error=''
    ((tries > 1)) && [[ $error == "${acked_on_retry:-}" ]] && break
    [[ $error == storage_unavailable || $error == connection ]] \
      || die "$* answered: $out"
    errors+=${errors:+,}$error
    ((tries < tries_max)) \
      || die "$* still unacknowledged after $tries tries ($errors): $out"
    retry_pause "$tries"
  done
  if ((tries > 1)); then
    echo "$1 ${*: -1} $tries $(($(now_ms) - t0)) $errors" >>"$retries"
  fi
  echo "$out"
}

# The chat is keyed by its (random) id.
chat=$(random_chat)
: >"$retries"
acked_on_retry=already_exists until_acknowledged create-chat --balance=0 \
  --daily-images=0 --chat="$chat" >/dev/null

# The loop: credit i, then job i, until the stop file appears; each
# acknowledged top-up and commit is written down.
client_loop() {
  local i=0 r
  while [[ ! -e $tmp/stop ]]; do
    i=$((i + 1))
    until_acknowledged top-up --chat="$chat" --credits=1 --payment-id="pay-$i" >/dev/null
    echo "pay-$i" >>"$tmp/acked.top_up"
    r=$(until_acknowledged reserve --chat="$chat" --kind=image --request-id="job-$i" | jq .id)
    until_acknowledged start --chat="$chat" --reservation="$r" >/dev/null
    until_acknowledged commit --chat="$chat" --reservation="$r" >/dev/null
    echo "$r" >>"$tmp/acked.commit"
  done
}
: >"$tmp/acked.top_up"
: >"$tmp/acked.commit"
client_loop >"$tmp/client.err" 2>&1 &
client_pid=$!
on_exit_kill "$client_pid"

# /readyz sampled every 200 ms: was it 503 while no primary was reachable?
probe_readyz() {
  while [[ ! -e $tmp/stop ]]; do
    curl -s -o /dev/null -w '%{http_code}\n' --max-time 2 "$http/readyz" >>"$tmp/readyz" || true
    sleep 0.2
  done
}
probe_readyz &
on_exit_kill $!

acked() { wc -l <"$tmp/acked.$1"; }
commits_at_least() { (($(acked commit) >= $1)); }

# -- two failovers under load ----------------------------------------------------

# Each failover waits for 10 more commits first: the clients got through
# the previous one (a few seconds on a quiet machine: the rest of the
# outage, the clients' pause before their next try, 10 jobs).
for n in 1 2; do
  wait_until 120 commits_at_least $((n * 10)) \
    || die "the clients are stuck: $(tail -n 3 "$tmp/client.err")"
  note "$((n * 10)) jobs committed $(seconds "$waited_ms") s after the" \
    "$( ((n == 1)) && echo "clients started" || echo "failover")"
  t=$(now_ms)
  primary=$("$ha" failover 2>"$tmp/failover.err" | tail -n1) \
    || die "ha-cluster failover failed: $(tail -n 5 "$tmp/failover.err")"
  note "failover $n: $primary after $(seconds $(($(now_ms) - t))) s" \
    "($(acked commit) jobs committed so far;" \
    "$(grep -m1 -o 'promoted .* after the kill' "$tmp/failover.err"))"
done
before=$(acked commit)
wait_until 120 commits_at_least $((before + 10)) \
  || die "no commits after the failovers: $(tail -n 3 "$tmp/client.err")"
note "10 more jobs committed $(seconds "$waited_ms") s after the failover"
touch "$tmp/stop"
wait "$client_pid" || die "the client loop failed: $(tail -n 3 "$tmp/client.err")"

# -- the audit, on the primary now --------------------------------------------------

# A read through the connection string; like a client it tries again
# after a connection error (psql exits 2), as the old primary may still be
# rejoining. Reads are safe to repeat.
q() {
  local out rc tries=0
  while :; do
    tries=$((tries + 1)) rc=0
    out=$(psql -X -q -A -t -v ON_ERROR_STOP=1 "$dsn" -c "$1" 2>"$tmp/q.err") \
      || rc=$?
    ((rc == 0)) && break
    ((rc == 2 && tries < tries_max)) \
      || die "psql exited $rc after $tries tries: $(<"$tmp/q.err")"
    retry_pause "$tries"
  done
  echo "$out"
}
top_ups=$(acked top_up) commits=$(acked commit)
rows=$(q "SELECT count(*), count(DISTINCT payment_id) FROM ledger
          WHERE chat_id = $chat AND entry = 'top_up'")
[[ $rows == "$top_ups|$top_ups" ]] \
  || die "$top_ups acknowledged top-ups, the ledger holds (rows|payment ids) $rows"
missing=$(q "SELECT count(*) FROM unnest(string_to_array('$(paste -sd, "$tmp/acked.top_up")', ','))
             p WHERE NOT EXISTS (SELECT 1 FROM ledger WHERE payment_id = p)")
((missing == 0)) || die "$missing acknowledged top-ups are not in the ledger"
charged=$(q "SELECT count(*), count(DISTINCT reservation_id) FROM ledger
             WHERE chat_id = $chat AND entry = 'charge'
             AND reservation_id IN ($(paste -sd, "$tmp/acked.commit"))")
[[ $charged == "$commits|$commits" ]] \
  || die "$commits acknowledged commits, the ledger charges (rows|jobs) $charged"
all_charges=$(q "SELECT count(*) FROM ledger WHERE chat_id = $chat AND entry = 'charge'")
((all_charges == commits)) || die "$all_charges charges for $commits acknowledged commits"
balance=$(q "SELECT chargeonce_amount(pockets, 'balance') FROM chats WHERE chat_id = $chat")
((balance == top_ups - commits)) \
  || die "balance $balance, expected $top_ups credits - $commits jobs"
note "$top_ups top-ups and $commits commits acknowledged, each in the ledger" \
  "once; balance $balance; $(awk '
    { ops++; tries += $3; if ($4 > longest) longest = $4 }
    END { printf "%d operations needed retries with the same ids (%d tries" \
          " in all, the longest %.1f s)", ops, tries, longest / 1000 }' \
    "$retries")"
# Each retried operation, for whoever wonders whether the retries ran.
while read -r command key n ms errors; do
  echo "ha_failover: $command $key: $n tries ($(tally "$errors")), $(seconds "$ms") s"
done <"$retries"

grep -qx 503 "$tmp/readyz" || die "/readyz never said 503 during the failovers"
grep -qx 200 "$tmp/readyz" || die "/readyz never said 200"
metric() { curl -s "$http/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
(($(metric chargeonce_persistence_reconnects_total) >= 2)) \
  || die "reconnects: $(metric chargeonce_persistence_reconnects_total)"
awk -v s="$(metric chargeonce_storage_unavailable_seconds_total)" 'BEGIN { exit !(s > 0) }' \
  || die "no time without a primary counted"
# A connection counts as without a primary until an operation of its own
# finds one; it probes for it by itself meanwhile, with growing pauses.
all_reach_primary() { [[ $(metric chargeonce_storage_unavailable) == 0 ]]; }
wait_until 60 all_reach_primary \
  || die "connections still without a primary after 60 s:" \
    "$(metric chargeonce_storage_unavailable)"
note "/readyz 503 $(grep -cx 503 "$tmp/readyz") of $(wc -l <"$tmp/readyz") samples;" \
  "reconnects $(metric chargeonce_persistence_reconnects_total), without a primary" \
  "$(metric chargeonce_storage_unavailable_seconds_total) s; every connection" \
  "on the primary $(seconds "$waited_ms") s after the audit"

t=$(now_ms)
stop_server "$server_pid" 30
echo "ha_failover: all passed; the server stopped in $(seconds $(($(now_ms) - t))) s"
