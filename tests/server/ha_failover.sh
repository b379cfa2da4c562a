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
# same ids while the server answers storage_unavailable, as clients.md
# says. Meanwhile the primary's Postgres is killed (-9) twice. Afterwards,
# on the new primary: every acknowledged top-up and commit is in the ledger
# once, the balance is what the acknowledged operations say, /readyz was
# 503 while no primary was reachable, and the server counted its reconnects
# and its time without a primary. Prints the time each failover took and
# how many operations the clients retried. Needs the packages
# postgresql-15-auto-failover and pg-auto-failover-cli; fails, never skips,
# without them.
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

# -- the formation and the server -------------------------------------------------

dsn=$("$ha" start 2>"$tmp/start.err" | tail -n1)
[[ $dsn == *target_session_attrs=read-write* ]] || die "ha-cluster start printed '$dsn'"
note "formation up: $dsn"

start_server "$tmp/server" --postgres="$dsn" --port=0 --http-port=0 \
  --sweep-interval=1s --store-timeout=3s
http=http://127.0.0.1:$(port_of http)
cli=("$cli_bin" --server=127.0.0.1:"$server_port" --timeout=10s)
chat=$(random_chat)
"${cli[@]}" create-chat --chat="$chat" --balance=0 --daily-images=0 >/dev/null \
  || die "create-chat failed"

# -- clients ------------------------------------------------------------------------

# until_acknowledged ARGS...: the CLI call until it succeeds, the same ids
# every time; a storage_unavailable (or a lost connection) is retried, any
# other answer is a failure. Prints the answer; counts retries.
retries=$tmp/retries
until_acknowledged() {
  local out rc tries=0
  while :; do
    rc=0
    out=$("${cli[@]}" "$@" 2>/dev/null) || rc=$?
    ((rc == 0)) && break
    [[ $(jq -r .error <<<"$out" 2>/dev/null) =~ ^(storage_unavailable|overloaded|connection)$ ]] \
      || die "$* answered: $out"
    ((++tries < 300)) || die "$* still fails after 300 tries: $out"
    echo "$1" >>"$retries"
    sleep 0.1
  done
  echo "$out"
}

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
: >"$retries"
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

for n in 1 2; do
  poll 60 commits_at_least $((n * 10)) || die "the clients are stuck: $(tail -n 3 "$tmp/client.err")"
  t=$(now_ms)
  primary=$("$ha" failover 2>"$tmp/failover.err" | tail -n1) \
    || die "ha-cluster failover failed: $(tail -n 5 "$tmp/failover.err")"
  note "failover $n: $primary after $((($(now_ms) - t) / 1000)) s" \
    "($(acked commit) jobs committed so far)"
done
before=$(acked commit)
poll 60 commits_at_least $((before + 10)) || die "no commits after the failovers: $(tail -n 3 "$tmp/client.err")"
touch "$tmp/stop"
wait "$client_pid" || die "the client loop failed: $(tail -n 3 "$tmp/client.err")"

# -- the audit, on the primary now --------------------------------------------------

q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
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
  "once; balance $balance; $(wc -l <"$retries") retries with the same ids"

grep -qx 503 "$tmp/readyz" || die "/readyz never said 503 during the failovers"
grep -qx 200 "$tmp/readyz" || die "/readyz never said 200"
metric() { curl -s "$http/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
(($(metric chargeonce_persistence_reconnects_total) >= 2)) \
  || die "reconnects: $(metric chargeonce_persistence_reconnects_total)"
awk -v s="$(metric chargeonce_storage_unavailable_seconds_total)" 'BEGIN { exit !(s > 0) }' \
  || die "no time without a primary counted"
[[ $(metric chargeonce_storage_unavailable) == 0 ]] \
  || die "connections still without a primary: $(metric chargeonce_storage_unavailable)"
note "/readyz 503 $(grep -cx 503 "$tmp/readyz") of $(wc -l <"$tmp/readyz") samples;" \
  "reconnects $(metric chargeonce_persistence_reconnects_total), without a primary" \
  "$(metric chargeonce_storage_unavailable_seconds_total) s"

stop_server "$server_pid" 30
echo "ha_failover: all passed"
