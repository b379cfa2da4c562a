#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# usage: own_database.sh NAME COMMAND [ARG...]
#
# Runs COMMAND with CHARGEONCE_TEST_DSN naming a database of its own on the
# test cluster, made empty for it and dropped afterwards; exits with
# COMMAND's status. Every integration suite runs under it (CTest), so that
# two suites can run side by side: the servers' sweeps and scans, the
# suites' counts of rows and backends act on the whole database they were
# given, and now no other suite's rows are in it. Without
# CHARGEONCE_TEST_DSN the command runs as it is (and says what it lacks).
set -euo pipefail

(($# >= 2)) || {
  echo "usage: own_database.sh NAME COMMAND [ARG...]" >&2
  exit 2
}
name=$1
shift
if [[ -z ${CHARGEONCE_TEST_DSN:-} ]]; then
  exec "$@"
fi

# A Postgres identifier: lower case, [a-z0-9_], at most 63 bytes.
db=t_$(tr -c 'a-zA-Z0-9_\n' '_' <<<"$name" | tr 'A-Z' 'a-z')
db=${db:0:63}
cluster=$CHARGEONCE_TEST_DSN
admin() {
  psql "$cluster" -X -q -v ON_ERROR_STOP=1 -c "$1" >/dev/null
}
admin "DROP DATABASE IF EXISTS $db WITH (FORCE)"
admin "CREATE DATABASE $db"
# libpq: of two dbname keywords the last wins.
export CHARGEONCE_TEST_DSN="$cluster dbname=$db"

# In the background, so that a signal to this script (ctest's timeout, ^C)
# reaches the suite too, and the drop below still runs.
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || true' TERM INT
status=0
wait "$child" || status=$?
# A signal interrupts the first wait; the second reaps the child's status.
if kill -0 "$child" 2>/dev/null; then
  wait "$child" || status=$?
fi
admin "DROP DATABASE IF EXISTS $db WITH (FORCE)" \
  || echo "own_database.sh: could not drop $db" >&2
exit "$status"
