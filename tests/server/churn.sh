#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every request from short-lived clients is answered to the client that
# sent it: ROUNDS rounds of 16 chargeonce-cli processes at once, each
# connecting, asking `status` once and exiting, against one server.
#
# What it guards: with CAF 0.17.6's BASP deserialization worker, a client
# that connects on the socket number another client has just closed could
# have its request credited to the closed one; the answer then went nowhere
# and the CLI reported "no answer within N s" (about 1 request in 100 here,
# 10 of 640 in one run). protocol/config.hpp (deserialize_on_middleman_thread)
# is the fix; without it this test fails in almost every run.
#
# usage: churn.sh CHARGEONCE-SERVER CHARGEONCE-CLI [ROUNDS]
# Needs jq and CHARGEONCE_TEST_DSN (scripts/test); fails without them.
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

server_bin=$1
cli=$2
rounds=${3:-40}
clients=16

[[ -n ${CHARGEONCE_TEST_DSN:-} ]] || die "CHARGEONCE_TEST_DSN is not set (run scripts/test)"

tmp=$(mktemp -d "$PWD/churn.XXXXXX")
on_exit_remove "$tmp"

start_server "$tmp/server" --postgres="$CHARGEONCE_TEST_DSN" --port=0 \
  --log-level=debug
address="127.0.0.1:$server_port"

chat=$(random_chat)
"$cli" --server="$address" --timeout="$cli_timeout" create-chat --chat="$chat" \
  --balance=1 >/dev/null

# A lost answer never comes, a late one does: --timeout is a liveness
# bound (cli_timeout), far above a round's time, which is printed.
lost=0 slowest=0 slowest_round=0
started=$(now_us)
for round in $(seq 1 "$rounds"); do
  pids=()
  round_started=$(now_us)
  for i in $(seq 1 $clients); do
    "$cli" --server="$address" --timeout="$cli_timeout" status --chat="$chat" \
      >"$tmp/answer.$i" 2>"$tmp/answer.$i.err" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || true; done
  took=$(($(now_us) - round_started))
  ((took <= slowest)) || slowest=$took slowest_round=$round
  for i in $(seq 1 $clients); do
    got=$(jq -r '.chat // .error' "$tmp/answer.$i" 2>/dev/null || true)
    if [[ $got != "$chat" ]]; then
      echo "churn: round $round, client $i:" \
        "$(cat "$tmp/answer.$i" "$tmp/answer.$i.err")" >&2
      lost=$((lost + 1))
    fi
  done
done

total=$((rounds * clients))
answered=$(grep -c "status ok chat=$chat" "$tmp/server.log" || true)
echo "churn: $((total - lost)) of $total requests answered to their sender;" \
  "the server answered $answered; $rounds rounds in $(seconds_since "$started") s," \
  "the slowest (round $slowest_round) $((slowest / 1000)) ms"
((lost == 0)) || die "$lost of $total requests got no answer"
((answered == total)) || die "the server logged $answered answers, expected $total"
alive "$server_pid" || die "the server exited"
stop_server "$server_pid"
echo "churn: passed"
