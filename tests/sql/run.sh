#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The SQL functions' contracts in pgTAP (tests/sql/*.sql), run by pg_prove
# against the schema migrate() builds (applied here with psql, in its order:
# persistence/migrations, then persistence/functions). Each file runs in a
# transaction it rolls back.
#
# usage: run.sh   (needs pg_prove and the pgtap extension, Debian's
# libtap-parser-sourcehandler-pgtap-perl and postgresql-15-pgtap; fails,
# never skips, without them). On CHARGEONCE_TEST_DSN's database if set
# (CTest gives each entry an empty one), else on a cluster of its own.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/support/lib.sh
source "$here/../support/lib.sh"
# shellcheck source=scripts/lib/postgres.sh
source "$here/../../scripts/lib/postgres.sh"

command -v pg_prove >/dev/null ||
  die "pg_prove is required (libtap-parser-sourcehandler-pgtap-perl)"
started=$(now_us)
tmp=$(mktemp -d "$PWD/pgtap.XXXXXX")
chmod 755 "$tmp"
on_exit_remove "$tmp"
if [[ -n ${CHARGEONCE_TEST_DSN:-} ]]; then
  dsn=$CHARGEONCE_TEST_DSN
else
  on_exit_stop_postgres "$tmp/pg/data"
  dsn=$(pg_cluster_start "$tmp/pg" 2>/dev/null)
fi
pg_schema_apply "$tmp/pg" "$dsn"
psql "$dsn" -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pgtap" ||
  die "CREATE EXTENSION pgtap failed (postgresql-15-pgtap)"
# pg_prove takes the connection in parts, not as a conninfo string.
args=()
for pair in $dsn; do
  case ${pair%%=*} in
    host) args+=(--host "${pair#*=}") ;;
    port) args+=(--port "${pair#*=}") ;;
    dbname) args+=(--dbname "${pair#*=}") ;;
    user) args+=(--username "${pair#*=}") ;;
  esac
done
pg_prove "${args[@]}" --failures "$here"/*.sql
echo "pgtap: all files pass ($(seconds_since "$started") s)"
