#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two chargeonce-server processes on one Postgres, concurrent CLI clients
# aiming at the same chats through both (a client with an old server list):
# one active reservation per chat, one charge per commit, no negative pocket;
# and a watch subscribed to both servers, which both send every durable
# event, prints each event once.
# Usage: two_servers.sh SERVER CLI   (needs CHARGEONCE_TEST_DSN and jq)
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

server_bin=$1
cli=("$2" --timeout="$cli_timeout")

[[ -n ${CHARGEONCE_TEST_DSN:-} ]] || die "CHARGEONCE_TEST_DSN is not set (run scripts/test)"

tmp=$(mktemp -d "$PWD/two_servers.XXXXXX")
on_exit_remove "$tmp"

servers=() # their pids
# A cancel after start asks the worker to stop (a cancel_requested event).
policy=--image-cancel-after-start=request
start_server "$tmp/a" --postgres="$CHARGEONCE_TEST_DSN" --port=0 "$policy"
servers+=("$server_pid")
a="127.0.0.1:$server_port"
start_server "$tmp/b" --postgres="$CHARGEONCE_TEST_DSN" --port=0 "$policy"
servers+=("$server_pid")
b="127.0.0.1:$server_port"
server_of() { (($1 % 2 == 0)) && echo "$a" || echo "$b"; }

# Prints every client's answer and error output, so a failure says why.
show_answers() { # reserve|commit
  local f
  for f in "$tmp/$1".*; do
    [[ $f == *.err ]] && continue
    echo "$(basename "$f"): $(cat "$f") $(cat "$f.err")" >&2
  done
}

# Waits for the background CLI clients, not for the servers.
wait_for_clients() {
  local job
  for job in $(jobs -p); do
    [[ " ${servers[*]} " == *" $job "* ]] || wait "$job" || true
  done
}


for round in 1 2 3; do
  chat=$((RANDOM * 32768 + RANDOM + 200000000000))
  "${cli[@]}" --server="$a" create-chat --chat=$chat --balance=1 >/dev/null

  # 16 concurrent reserves of the same chat, half through each server.
  for i in $(seq 1 16); do
    "${cli[@]}" --server="$(server_of "$i")" reserve --chat=$chat --kind=image \
      >"$tmp/reserve.$i" 2>"$tmp/reserve.$i.err" &
  done
  
  wait_for_clients
  won=$(cat "$tmp"/reserve.? "$tmp"/reserve.?? | jq -r 'select(.id != null) | .id')
  busy=$(cat "$tmp"/reserve.? "$tmp"/reserve.?? | jq -r 'select(.error == "busy") | .error' | wc -l)
  if [[ $(wc -w <<<"$won") != 1 || $busy != 15 ]]; then
    show_answers reserve
    [[ $(wc -w <<<"$won") == 1 ]] || die "round $round: $(wc -w <<<"$won") reservations won"
    die "round $round: $busy busy, expected 15"
  fi
  rm -f "$tmp"/reserve.*

  "${cli[@]}" --server="$b" start --chat=$chat --reservation="$won" >/dev/null
  # The worker's commit retried through both servers at once.
  for i in $(seq 1 8); do
    "${cli[@]}" --server="$(server_of "$i")" commit --chat=$chat \
      --reservation="$won" >"$tmp/commit.$i" 2>"$tmp/commit.$i.err" &
  done
  wait_for_clients
  receipts=$(cat "$tmp"/commit.? | jq -r '.committed_at' | sort -u)
  if [[ $(wc -l <<<"$receipts") != 1 || $receipts == null ]]; then
    show_answers commit
    die "round $round: commits answered differently: $receipts"
  fi
  rm -f "$tmp"/commit.*
  balance=$("${cli[@]}" --server="$a" status --chat=$chat | jq .balance)
  [[ $balance == 0 ]] || die "round $round: balance $balance, expected 0"
  echo "two_servers: round $round: 1 reservation, 15 busy, 8 commits, 1 charge"
done

# A watch of both servers: each sends every durable event (each reads the
# events table), and the watch prints each event id once.
"${cli[@]}" --servers="$a,$b" watch >"$tmp/watch.out" 2>"$tmp/watch.err" &
watch_pid=$!
on_exit_kill "$watch_pid"
subscribed() {
  alive "$watch_pid" || die "watch exited: $(cat "$tmp/watch.err")"
  grep -q '^chargeonce-cli: watching' "$tmp/watch.err"
}
poll 60 subscribed || die "the watch did not subscribe within 60 s"
echo "two_servers: the watch subscribed after $poll_seconds s"
chat=$((RANDOM * 32768 + RANDOM + 200000000000))
"${cli[@]}" --server="$a" create-chat --chat=$chat --balance=1 >/dev/null
id=$("${cli[@]}" --server="$a" reserve --chat=$chat --kind=image | jq -r .id)
"${cli[@]}" --server="$a" start --chat=$chat --reservation="$id" >/dev/null
"${cli[@]}" --server="$a" cancel --chat=$chat --reservation="$id" >/dev/null
# announced: the lines announcing that cancel request (other suites' chats
# may show up too).
announced() {
  jq -c --argjson r "$id" 'select(.event == "cancel_requested"
    and .reservation == $r)' "$tmp/watch.out" | wc -l
}
printed() { (($(announced) > 0)); }
poll 60 printed || die "the cancel request of $id was not printed within 60 s"
echo "two_servers: the cancel request printed after $poll_seconds s"
# Both servers poll the table every 200 ms while anyone subscribes: a
# second copy would be printed within a second. (A wait for something not
# to happen: a slow machine can only make it pass.)
sleep 1.5
count=$(announced)
((count == 1)) || die "the cancel request of $id was printed $count times, expected once: $(cat "$tmp/watch.out")"
"${cli[@]}" --server="$b" fail --chat=$chat --reservation="$id" >/dev/null
echo "two_servers: a watch of both servers printed the cancel request once"
kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true

for pid in "${servers[@]}"; do
  stop_server "$pid"
done
echo "two_servers: passed"
