#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Mean µs per batch of chargeonce_apply_batch's statements (and of the
# function) for each variant, pg_stat_statements over statements.sql, on a
# scratch cluster under var/experiment-statements migrated by this tree's
# server:
#   docs/experiments/pocket-representation/statements.sh base arrays free
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
root=$(pwd)
# shellcheck source=scripts/lib/postgres.sh
source scripts/lib/postgres.sh
here=docs/experiments/pocket-representation
dir=$root/var/experiment-statements
dsn=$(pg_cluster_start "$dir")
if ! psql "$dsn" -qAtc "SHOW shared_preload_libraries" | grep -q pg_stat_statements; then
  psql "$dsn" -qc "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
  pg_cluster_stop "$dir"
  dsn=$(pg_cluster_start "$dir")
fi
trap 'pg_cluster_stop "$dir"' EXIT
# The server migrates the database when it starts.
port_file=$(mktemp)
"${BUILD_DIR:-build}/main/chargeonce-server" --postgres="$dsn" --port=0 \
  --port-file="$port_file" >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do [[ -s $port_file ]] && break; sleep 0.1; done
kill "$server"
wait "$server" 2>/dev/null || true
rm -f "$port_file"
psql "$dsn" -qc "SET client_min_messages = warning" \
  -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
if [[ " $* " == *" arrays"* ]] && ! psql "$dsn" -qAtc \
  "SELECT 1 FROM pg_attribute WHERE attrelid = 'chats'::regclass AND attname = 'pv'" | grep -q 1; then
  psql "$dsn" -q -v ON_ERROR_STOP=1 -f "$here/arrays.sql"
fi
for v in "$@"; do
  "$here/variants.py" "$v" | psql "$dsn" -q -v ON_ERROR_STOP=1
  psql "$dsn" -q -v ON_ERROR_STOP=1 -f "$here/statements.sql" # warm-up
  psql "$dsn" -q -v ON_ERROR_STOP=1 -c "SET pg_stat_statements.track = 'all'" \
    -c "SELECT pg_stat_statements_reset()" -f "$here/statements.sql" >/dev/null
  echo "== $v"
  psql "$dsn" -qAt -F ' ' -c "
    SELECT round((total_exec_time / calls * 1000)::numeric),
           CASE WHEN query LIKE '%FROM chargeonce_apply_batch%' THEN 'function'
                WHEN query LIKE 'WITH req%' THEN 'reserve'
                WHEN query LIKE 'WITH s %' THEN 'start'
                WHEN query LIKE 'WITH cm%' THEN 'commit'
                WHEN query LIKE '%FOR UPDATE%' THEN 'lock' END
      FROM pg_stat_statements
     WHERE calls >= 1900 AND (query LIKE '%FROM chargeonce_apply_batch%'
                              OR query LIKE 'WITH %'
                              OR query LIKE '%chat_id = ANY (v_lock_chats)%')
     ORDER BY 1 DESC"
done
"$here/variants.py" base | psql "$dsn" -q -v ON_ERROR_STOP=1
