#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python client package (clients/python) end to end: it installs
# offline into a virtual environment (Debian's way: venv with the system's
# site packages, pip without an index or build isolation), and its pytest
# suite passes against the installed copy: the unit tests (retry policy,
# auto request ids, error classes, SSE, with a scripted transport) and the
# integration tests against a real chargeonce-server started here with HTTP
# and the three role tokens (every route, typed results, the error classes,
# retries after lost answers that hold and charge once, the event stream and
# resuming it, the asyncio client).
#
# usage: python.sh SERVER SOURCE_DIR   (needs Debian's python3 with
# python3-venv, python3-pip, python3-pytest, python3-aiohttp and
# python3-celery (the Celery integration's unit tests); fails,
# never skips, without them; PYTHON names another interpreter). The server
# runs on its own database in the CHARGEONCE_TEST_DSN cluster if that is
# set, else on an embedded cluster in the temp dir.
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 2)) || die "usage: python.sh SERVER SOURCE_DIR"
server_bin=$(realpath "$1")
src=$(realpath "$2")
started=$(now_us)

ok() { echo "python: ok: $*"; }

# Debian's interpreter, not one a version manager put first on PATH: the
# venv sees the system's site packages (pytest, aiohttp) only through it.
python=${PYTHON:-/usr/bin/python3}
[[ -x $python ]] || die "$python is required (python3; scripts/install-deps)"
"$python" - <<'PY' || die "python3-venv, python3-pip, python3-pytest, python3-aiohttp and python3-celery are required (scripts/install-deps)"
import ensurepip, venv, pytest, aiohttp, celery  # noqa: F401  (each one missing fails here)
PY

# Under $PWD (ctest: the build dir), not /tmp: as root an embedded cluster
# runs as `postgres`, which must reach it.
tmp=$(mktemp -d "$PWD/python.XXXXXX")
chmod 755 "$tmp"
on_exit_remove "$tmp"

# -- the package ------------------------------------------------------------------

# A copy: pip builds in the package's directory (build/, *.egg-info), and
# the source tree is left as it is.
cp -r "$src/clients/python" "$tmp/package"
rm -rf "$tmp/package/build" "$tmp/package"/src/*.egg-info
"$python" -m venv --system-site-packages "$tmp/venv" >"$tmp/pip.log" 2>&1 \
  || die "python3 -m venv: $(cat "$tmp/pip.log")"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$tmp/venv/bin/pip" install --no-index --no-build-isolation "$tmp/package" \
  >>"$tmp/pip.log" 2>&1 || die "pip install (offline): $(tail -n 20 "$tmp/pip.log")"
# The tests must exercise the installed copy, typed, not the source tree.
(cd "$tmp" && "$tmp/venv/bin/python" - <<'PY') || die "the installed package is not the venv's"
import os, sys, chargeonce
where = os.path.dirname(chargeonce.__file__)
assert where.startswith(sys.prefix), where
assert os.path.exists(os.path.join(where, "py.typed")), "py.typed not installed"
PY
ok "installs offline into a venv (pip --no-index --no-build-isolation), py.typed included"
rm -rf "$tmp/package/src" # from here on only the installed copy can be imported

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
# The built-in catalog and a "voice" kind paid only from a pocket of its
# own (insufficient_funds, a catalog's pocket in create-chat); text jobs take
# a cancel after start as a request, image jobs refuse it (both are tested).
"$server_bin" --print-default-catalog | "$python" -c '
import json, sys
catalog = json.load(sys.stdin)
catalog["kinds"]["text"]["cancel_after_start"] = "request"
catalog["pockets"]["daily_voice"] = {"daily": {"free": 0, "premium": 0}}
catalog["kinds"]["voice"] = {"pay_from": [{"pocket": "daily_voice", "price": 1}],
                             "premium_free": False, "queue": "voice_generation",
                             "priority_queue": "voice_generation_priority",
                             "cancel_after_start": "refuse"}
json.dump(catalog, sys.stdout)' >"$tmp/catalog.json" || die "could not write the catalog"
# The integration tests rely on these timers.
start_server "$tmp/server" "${database[@]}" --port=0 --http-port=0 \
  --http-gateway-token-file="$tmp/gateway.token" \
  --http-worker-token-file="$tmp/worker.token" \
  --http-admin-token-file="$tmp/admin.token" \
  --queue-notice-delay=1s --lease-duration=3s --sweep-interval=1s \
  --catalog="$tmp/catalog.json" --http-threads=16 --http-max-streams=8
port=$(port_of http)
[[ -n $port ]] || die "no http= line in the port file: $(cat "$server_port_file")"
echo "python: server pid $server_pid, HTTP on 127.0.0.1:$port" \
  "($(seconds_since "$started") s since the start)"

# -- the suite --------------------------------------------------------------------

suite_started=$(now_us)
status=0
(cd "$tmp/package" \
  && CHARGEONCE_TEST_URL=http://127.0.0.1:$port \
    CHARGEONCE_TEST_GATEWAY_TOKEN=$(<"$tmp/gateway.token") \
    CHARGEONCE_TEST_WORKER_TOKEN=$(<"$tmp/worker.token") \
    CHARGEONCE_TEST_ADMIN_TOKEN=$(<"$tmp/admin.token") \
    PYTHONDONTWRITEBYTECODE=1 \
    "$tmp/venv/bin/python" -m pytest -q -rs --junitxml="$tmp/junit.xml" \
      tests/unit tests/integration) \
  || status=$?
((status == 0)) || die "pytest exited $status (see above)"
# Both halves ran, none skipped.
count() { grep -o "classname=\"tests\.$1\.[^\"]*\"" "$tmp/junit.xml" | wc -l; }
unit=$(count unit) integration=$(count integration)
skipped=$(grep -c "<skipped" "$tmp/junit.xml" || true)
((unit > 0 && integration > 0)) || die "a suite did not run: unit $unit, integration $integration"
((skipped == 0)) || die "$skipped tests were skipped"
echo "python: pytest took $(seconds_since "$suite_started") s"
ok "unit: $unit tests; integration: $integration tests; none skipped"

stop_server "$server_pid"
echo "python: all passed in $(seconds_since "$started") s"
