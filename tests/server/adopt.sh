#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The embedded cluster belongs to its data directory, not to the process
# that started it: a server killed with SIGKILL leaves its Postgres running;
# the next server on that data directory adopts it and stops it on SIGTERM
# like one it started. A second server on a data directory whose owner
# still runs reuses the cluster and leaves it to the owner.
#
# usage: adopt.sh SERVER
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 1)) || die "usage: adopt.sh SERVER"
server_bin=$(realpath "$1")

tmp=$(mktemp -d "$PWD/adopt.XXXXXX")
chmod 755 "$tmp"
on_exit_remove "$tmp"
on_exit_stop_postgres "$tmp/pg/data"
pid_file=$tmp/pg/data/postmaster.pid

postmaster_alive() {
  [[ -f $pid_file ]] && kill -0 "$(head -n1 "$pid_file")" 2>/dev/null
}

# 1. Started, then killed: its Postgres is left behind.
start_server "$tmp/first" --port=0 --data-dir="$tmp/pg"
kill -KILL "$server_pid"
wait_gone "$server_pid" 60 || die "the first server survived SIGKILL"
reap "$server_pid"
postmaster_alive || die "expected the first server's Postgres to be left running"

# 2. The next server adopts it; a third one meanwhile only reuses it.
start_server "$tmp/second" --port=0 --data-dir="$tmp/pg"
owner=$server_pid
grep -q "adopting it" "$tmp/second.log" \
  || die "the second server did not adopt the cluster: $(grep postgres "$tmp/second.log")"
start_server "$tmp/third" --port=0 --data-dir="$tmp/pg"
grep -q "another server owns it" "$tmp/third.log" \
  || die "the third server did not see the owner: $(grep postgres "$tmp/third.log")"
stop_server "$server_pid"
postmaster_alive || die "the third server stopped a cluster the second still serves"

# 3. The owner stops it on SIGTERM, like one it started.
stop_server "$owner"
postmaster_gone() { ! postmaster_alive; }
poll 60 postmaster_gone \
  || die "Postgres still runs 60 s after its adopting server stopped"
echo "adopt: Postgres gone $poll_seconds s after its adopting server stopped"
echo "adopt: ok"
