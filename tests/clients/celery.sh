#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package's Celery integration on real processes: a Redis broker
# of its own on a loopback port, a chargeonce-server with short timers, and
# two `celery worker` processes (prefork, one child each) running the billed
# task of clients/python/tests/workers/billing_app.py, whose provider stub
# counts its calls in files. The scenarios (tests/workers/test_two_workers.py):
# success charged once; an exception not charged; kill -9 of the process
# running a task, whose redelivery is dropped unrun (the provider called
# once, nothing charged); a double press with one request id runs one task;
# cancel while queued; a provider timeout left uncertain; a cancel request
# reaching the running task. First, a worker whose broker visibility timeout
# is not longer than lease plus sweep must refuse to start. Last, the
# python-telegram-bot example (clients/python/examples/telegram_bot.py) with
# a worker of its own against a stub Bot API server on loopback
# (tests/workers/test_telegram_bot.py): the button reserves, the queue
# notice becomes "you are in the queue", the task commits once, a second
# tap of the same button runs nothing.
#
# usage: celery.sh SERVER SOURCE_DIR   (needs Debian's python3 with
# python3-venv, python3-pip, python3-pytest, python3-celery, python3-redis
# and redis-server; fails, never skips, without them).
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 2)) || die "usage: celery.sh SERVER SOURCE_DIR"
server_bin=$(realpath "$1")
src=$(realpath "$2")
started=$(now_us)

ok() { echo "celery: ok: $*"; }

python=${PYTHON:-/usr/bin/python3}
[[ -x $python ]] || die "$python is required (python3; scripts/install-deps)"
"$python" -c 'import ensurepip, venv, pytest, celery, redis' \
  || die "python3-venv, python3-pip, python3-pytest, python3-celery and python3-redis are required (scripts/install-deps)"
command -v redis-server >/dev/null || die "redis-server is required (scripts/install-deps)"
"$python" -c 'import telegram' 2>/dev/null \
  || die "python3-python-telegram-bot is required (scripts/install-deps)"

tmp=$(mktemp -d "$PWD/celery.XXXXXX")
chmod 755 "$tmp"
on_exit_remove "$tmp"
mkdir "$tmp/state"

# -- the package ------------------------------------------------------------------

cp -r "$src/clients/python" "$tmp/package"
rm -rf "$tmp/package/build" "$tmp/package"/src/*.egg-info
"$python" -m venv --system-site-packages "$tmp/venv" >"$tmp/pip.log" 2>&1 \
  || die "python3 -m venv: $(cat "$tmp/pip.log")"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$tmp/venv/bin/pip" install --no-index --no-build-isolation "$tmp/package" \
  >>"$tmp/pip.log" 2>&1 || die "pip install (offline): $(tail -n 20 "$tmp/pip.log")"
rm -rf "$tmp/package/src"
ok "the package installs offline into a venv ($(seconds_since "$started") s)"

# -- Redis, the server ----------------------------------------------------------

free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
redis_port=$(free_port)
mkdir "$tmp/redis"
redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$tmp/redis" --save '' \
  --appendonly no --daemonize no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
on_exit_kill "$redis_pid"
on_exit_show_log "$tmp/redis.log"
redis_up() { grep -q "Ready to accept connections" "$tmp/redis.log"; }
poll 60 redis_up || die "redis-server does not start: $(tail -n 5 "$tmp/redis.log")"
echo "celery: redis pid $redis_pid on 127.0.0.1:$redis_port (up after $poll_seconds s)"

token() { echo "$1-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
for role in gateway worker admin; do
  token "$role" >"$tmp/$role.token"
done
if [[ -n ${CHARGEONCE_TEST_DSN:-} ]]; then
  database=(--postgres="$CHARGEONCE_TEST_DSN")
else
  socket="$tmp/pg/socket/.s.PGSQL.5432"
  ((${#socket} <= 107)) || die "the working dir is too deep for a Unix socket: $socket"
  database=(--data-dir="$tmp/pg")
  on_exit_stop_postgres "$tmp/pg/data"
fi
# billing_app.py's install() names these timers (lease 5 s, sweep 1 s). The
# lease is longer than the others' 3 s: a task whose process is killed comes
# back after about 3 s here, and it must meet its job still leased, so that
# only its worker identity can tell it from the first delivery.
start_server "$tmp/server" "${database[@]}" --port=0 --http-port=0 \
  --http-gateway-token-file="$tmp/gateway.token" \
  --http-worker-token-file="$tmp/worker.token" \
  --http-admin-token-file="$tmp/admin.token" \
  --queue-notice-delay=1s --lease-duration=5s --sweep-interval=1s \
  --text-cancel-after-start=request --http-threads=16
port=$(port_of http)
echo "celery: server pid $server_pid, HTTP on 127.0.0.1:$port ($(seconds_since "$started") s since the start)"

CHARGEONCE_TEST_GATEWAY_TOKEN=$(<"$tmp/gateway.token")
CHARGEONCE_TEST_WORKER_TOKEN=$(<"$tmp/worker.token")
CHARGEONCE_TEST_ADMIN_TOKEN=$(<"$tmp/admin.token")
export CHARGEONCE_TEST_URL=http://127.0.0.1:$port CHARGEONCE_TEST_GATEWAY_TOKEN \
  CHARGEONCE_TEST_WORKER_TOKEN CHARGEONCE_TEST_ADMIN_TOKEN \
  CHARGEONCE_TEST_REDIS=redis://127.0.0.1:$redis_port/0 \
  CHARGEONCE_TEST_STATE=$tmp/state \
  PYTHONPATH=$tmp/package/tests/workers PYTHONDONTWRITEBYTECODE=1

# -- the workers ------------------------------------------------------------------

# worker NAME [VAR=VALUE...]: starts a celery worker in the background; sets worker_pid.
worker() {
  local name=$1
  shift
  (cd "$tmp/package/tests/workers" && exec env "$@" "$tmp/venv/bin/python" -m celery -A billing_app worker \
    --hostname="$name@%h" --concurrency=1 --pool=prefork --loglevel=INFO \
    --queues=image_generation,image_generation_priority,text_generation,text_generation_priority --without-gossip --without-mingle) \
    >"$tmp/$name.log" 2>&1 &
  worker_pid=$!
  on_exit_show_log "$tmp/$name.log"
}

# A visibility timeout of 6 s is not above lease + sweep (5 + 1 s): refused.
worker misconfigured CHARGEONCE_TEST_VISIBILITY=6
on_exit_kill "$worker_pid"
exited() { ! alive "$worker_pid"; }
poll 60 exited || die "a worker with visibility_timeout 6 s did not refuse to start"
reap "$worker_pid"
((status != 0)) || die "the misconfigured worker exited 0"
grep -q "visibility_timeout.*must exceed" "$tmp/misconfigured.log" \
  || die "the misconfigured worker did not say why: $(tail -n 5 "$tmp/misconfigured.log")"
ok "a worker whose visibility timeout is not above lease + sweep refuses to start (exit $status)"

pids=()
for name in w1 w2; do
  worker "$name"
  on_exit_kill "$worker_pid"
  pids+=("$worker_pid")
done
for name in w1 w2; do
  ready() { grep -q "$name@.* ready\." "$tmp/$name.log"; }
  poll 120 ready || die "worker $name is not ready: $(tail -n 5 "$tmp/$name.log")"
  echo "celery: worker $name ready after $poll_seconds s more"
done
export CHARGEONCE_TEST_WORKER_PIDS="${pids[*]}"

# -- the scenarios ----------------------------------------------------------------

suite_started=$(now_us)
status=0
(cd "$tmp/package/tests/workers" \
  && "$tmp/venv/bin/python" -m pytest -q -s -rs -p no:cacheprovider \
    --junitxml="$tmp/junit.xml" test_two_workers.py test_telegram_bot.py) || status=$?
((status == 0)) || die "pytest exited $status (see above)"
ran=$(grep -o 'tests="[0-9]*"' "$tmp/junit.xml" | head -n1 | tr -dc 0-9)
skipped=$(grep -c "<skipped" "$tmp/junit.xml" || true)
((ran >= 9 && skipped == 0)) || die "ran $ran scenarios, skipped $skipped"
for pid in "${pids[@]}"; do
  alive "$pid" || die "worker $pid has exited"
done
# Which worker got what: the broker hands each message to whichever asks
# first, so a share is reported, not required.
for name in w1 w2; do
  echo "celery: worker $name received $(grep -c "Task billing_app.render\[.*\] received" "$tmp/$name.log" || true) task messages"
done
echo "celery: the scenarios took $(seconds_since "$suite_started") s"
ok "$ran scenarios on two workers"

for pid in "${pids[@]}"; do
  kill -TERM "$pid"
done
for pid in "${pids[@]}"; do
  wait_gone "$pid" 30 || die "worker $pid still runs 30 s after SIGTERM"
done
stop_server "$server_pid"
echo "celery: all passed in $(seconds_since "$started") s"
