#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Alternating 64-client remote runs (chargeonce-bench --clients=64
# --duration=10, blocking client) of a build before the catalog and of
# variants of chargeonce_apply_batch on this tree's build, each side on a
# scratch cluster of its own under var/experiment-*:
#   docs/experiments/pocket-representation/alternate.sh BEFORE_BUILD_DIR \
#     ROUNDS VARIANT...
# e.g. (1f184b6 built in /tmp/pre with `git worktree add /tmp/pre 1f184b6`):
#   docs/experiments/pocket-representation/alternate.sh /tmp/pre/build 3 \
#     base arrays free
# Prints one line per round: cycles/s of the before build, then of each
# variant. The arrays variants add arrays.sql's columns to its cluster.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
root=$(pwd)
# shellcheck source=scripts/lib/postgres.sh
source scripts/lib/postgres.sh
here=docs/experiments/pocket-representation
before=$1 rounds=$2
shift 2
after=${BUILD_DIR:-build}

before_dsn=$(pg_cluster_start "$root/var/experiment-before")
after_dsn=$(pg_cluster_start "$root/var/experiment-after")
trap 'pg_cluster_stop "$root/var/experiment-before"; pg_cluster_stop "$root/var/experiment-after"' EXIT

# run BUILD DSN: one server, one bench run; prints cycles/s.
run() {
  local port_file server out
  port_file=$(mktemp) out=$(mktemp)
  "$1/main/chargeonce-server" --postgres="$2" --port=0 \
    --port-file="$port_file" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 100); do [[ -s $port_file ]] && break; sleep 0.1; done
  "$1/main/chargeonce-bench" --postgres="$2" \
    --servers="127.0.0.1:$(cat "$port_file")" --clients=64 --duration=10 \
    --json >"$out" 2>/dev/null || true
  kill "$server"
  wait "$server" 2>/dev/null || true
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["cycles_per_s"])' "$out"
  rm -f "$port_file" "$out"
}

# A server migrates its cluster when it starts: one short run each first.
run "$before" "$before_dsn" >/dev/null
run "$after" "$after_dsn" >/dev/null
if [[ " $* " == *" arrays"* ]] && ! psql "$after_dsn" -qAtc \
  "SELECT 1 FROM pg_attribute WHERE attrelid = 'chats'::regclass AND attname = 'pv'" | grep -q 1; then
  psql "$after_dsn" -q -v ON_ERROR_STOP=1 -f "$here/arrays.sql"
fi
for ((i = 1; i <= rounds; i++)); do
  line="before $(run "$before" "$before_dsn")"
  for v in "$@"; do
    "$here/variants.py" "$v" | psql "$after_dsn" -q -v ON_ERROR_STOP=1
    line+=" | $v $(run "$after" "$after_dsn")"
  done
  echo "$line"
done
"$here/variants.py" base | psql "$after_dsn" -q -v ON_ERROR_STOP=1
