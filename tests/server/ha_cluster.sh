#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/ha-cluster end to end: a pg_auto_failover formation (monitor, two
# data nodes, synchronous replication) in a temp dir under $PWD (ctest: the
# build dir), on ports of its own.
#
# usage: ha_cluster.sh HA-CLUSTER
#
# Story: `start` prints the multi-host connection string, which reaches the
# writable node; a second `start` changes nothing and prints it again;
# `status` shows a primary and a secondary, and the primary replicates
# synchronously. `failover` (kill -9 of the primary's postmaster) promotes
# the other node, and the same connection string finds the data there and
# writes. `failover --whole-node` (kill -9 of the new primary's pg_autoctl
# and Postgres) moves back, which is only possible once the first killed
# node rejoined, every row kept, and brings its killed node back as
# secondary. `stop` leaves no process behind, and
# `start` brings the same data back. Prints the time `start` and each
# failover took. Needs the packages
# postgresql-15-auto-failover and pg-auto-failover-cli (scripts/install-deps);
# fails, never skips, without them.
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 1)) || die "usage: ha_cluster.sh HA-CLUSTER"
ha=$(realpath "$1")
[[ -x $ha ]] || die "not an executable: $ha"
command -v psql >/dev/null || die "psql is required (scripts/install-deps)"
command -v pg_autoctl >/dev/null \
  || die "pg_autoctl is required: install postgresql-15-auto-failover and" \
    "pg-auto-failover-cli (scripts/install-deps)"
# Our psql must connect where the connection strings say, nowhere else.
for var in $(compgen -e); do
  if [[ $var == PG* ]]; then unset "$var"; fi
done

tmp=$(mktemp -d "$PWD/ha.XXXXXX")
# As root the formation runs as postgres, which must be able to enter.
chmod 755 "$tmp"
export HA_DIR=$tmp/ha
# Three ports of our own, away from 5432 and from parallel runs, and above
# the ephemeral range, from which outgoing connections (many here: health
# checks, replication) take their local port: one of those holding a node's
# port keeps that node from starting.
read -r ephemeral_lo ephemeral_hi </proc/sys/net/ipv4/ip_local_port_range
if ((ephemeral_hi <= 64000)); then
  slots=$(((65533 - ephemeral_hi) / 3))
  export HA_PORT_BASE=$((ephemeral_hi + 1 + ($$ % slots) * 3))
elif ((ephemeral_lo >= 4000)); then
  export HA_PORT_BASE=$((ephemeral_lo - 1503 + ($$ % 500) * 3))
else
  export HA_PORT_BASE=$((56430 + ($$ % 500) * 3))
fi
port_a=$((HA_PORT_BASE + 1)) port_b=$((HA_PORT_BASE + 2))

note() { echo "ha_cluster: ok: $*"; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Milliseconds as seconds with one decimal.
seconds() { printf '%d.%d' $(($1 / 1000)) $((($1 % 1000) / 100)); }

# The postgres, pg_autoctl (and runuser, pg_* tool) processes of the
# formation: naming HA_DIR on their command line, running in it, or writing
# to a file in it. Zombies do not count.
formation_processes() {
  local proc pid comm link
  for proc in /proc/[0-9]*; do
    pid=${proc#/proc/}
    comm=$(cat "$proc/comm" 2>/dev/null) || continue
    case $comm in postgres | pg_autoctl | runuser | pg_*) ;; *) continue ;; esac
    [[ $(awk '{print $3}' "$proc/stat" 2>/dev/null) != Z ]] || continue
    for link in "$proc/cwd" "$proc/fd/1" "$proc/fd/2"; do
      if [[ $(readlink "$link" 2>/dev/null) == "$HA_DIR"/* ]]; then
        echo "$pid $({ tr '\0' ' ' <"$proc/cmdline"; } 2>/dev/null)"
        continue 2
      fi
    done
    if { tr '\0' '\n' <"$proc/cmdline"; } 2>/dev/null | grep -qF "$HA_DIR/"
    then
      echo "$pid $({ tr '\0' ' ' <"$proc/cmdline"; } 2>/dev/null)"
    fi
  done
}

no_formation_processes() {
  [[ -z $(formation_processes) ]]
}

# On exit: stop the formation, SIGKILL whatever it left (the temp dir goes
# next, lib.sh's on_exit_remove).
cleanup_formation() {
  local pids
  [[ -d $HA_DIR ]] || return 0
  "$ha" stop >/dev/null 2>&1 || echo "ha_cluster: '$ha stop' failed" >&2
  pids=$(formation_processes | awk '{print $1}')
  if [[ -n $pids ]]; then
    echo "ha_cluster: killing what stop left: $pids" >&2
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL $pids 2>/dev/null || true
  fi
}
on_exit_remove "$tmp"
on_exit_run cleanup_formation
on_exit_show_log "$tmp/*.err" "$HA_DIR/*.log"

# Runs `ha-cluster COMMAND [OPTION]`, expecting exit status 0; its stdout
# goes to the global `out`, its last line to `last`, its stderr to
# $tmp/COMMAND.err.
run_ha() {
  local rc=0
  out=$("$ha" "$@" 2>"$tmp/$1.err") || rc=$?
  ((rc == 0)) || die "'ha-cluster $*' exited $rc: $(tail -n 30 "$tmp/$1.err")"
  last=$(tail -n1 <<<"$out")
}

# psql through connection string `conn`: one or more -c commands, output
# unaligned, tuples only, to stdout.
sql() {
  local conn=$1
  shift
  psql -X -q -A -t -v ON_ERROR_STOP=1 "$conn" "$@"
}

node_conn() {
  echo "host=127.0.0.1 port=$1 dbname=chargeonce user=chargeonce" \
    "connect_timeout=5"
}

# The port of the node `status` reports in reported and assigned state
# `state` (one line each), from `pg_autoctl show state`'s table.
ports_in_state() {
  awk -F'|' -v s="$2" '
    function trim(x) { gsub(/^ +| +$/, "", x); return x }
    NF >= 7 && trim($6) == s && trim($7) == s {
      n = split(trim($3), hp, ":"); print hp[n]
    }' <<<"$1"
}

# -- start --------------------------------------------------------------------

die_where="in start"
t0=$(now_ms)
run_ha start
start_ms=$(($(now_ms) - t0))
conn=$last
want="host=127.0.0.1,127.0.0.1 port=$port_a,$port_b dbname=chargeonce"
want+=" user=chargeonce target_session_attrs=read-write connect_timeout=5"
[[ $conn == "$want" ]] \
  || die "the last line of start is not the connection string: '$conn'" \
    "(expected '$want')"
note "start took $(seconds "$start_ms") s and printed: $conn"

# Through the multi-host string: the read-write node.
first=$(sql "$conn" -c "CREATE TABLE ha_probe (id int PRIMARY KEY, note text)" \
  -c "INSERT INTO ha_probe VALUES (1, 'before the failovers')" \
  -c "SELECT inet_server_port()") || die "psql through '$conn' failed"
[[ $first == "$port_a" || $first == "$port_b" ]] \
  || die "wrote through the connection string on port '$first'," \
    "not $port_a or $port_b"
note "created a table and inserted a row through it (node on port $first)"

# A running formation: start changes nothing, prints the same line.
run_ha start
[[ $last == "$conn" ]] \
  || die "a second start printed '$last', not the same line '$conn'"
note "a second start printed the same line and exited 0"

# -- status and synchronous replication ---------------------------------------

die_where="in status"
run_ha status
primaries=$(ports_in_state "$out" primary)
secondaries=$(ports_in_state "$out" secondary)
[[ $(wc -w <<<"$primaries") == 1 && $(wc -w <<<"$secondaries") == 1 ]] \
  || die "status does not show one primary and one secondary: $out"
primary=$primaries secondary=$secondaries
[[ $primary == "$first" ]] \
  || die "status shows the primary on port $primary, but the connection" \
    "string wrote on port $first"
note "status: primary on port $primary, secondary on port $secondary"

names=$(sql "$(node_conn "$primary")" -c "SHOW synchronous_standby_names")
[[ -n $names ]] || die "the primary's synchronous_standby_names is empty"
commit=$(sql "$(node_conn "$primary")" -c "SHOW synchronous_commit")
[[ $commit == on ]] || die "the primary's synchronous_commit is '$commit'"
recovery=$(sql "$(node_conn "$secondary")" -c "SELECT pg_is_in_recovery()")
[[ $recovery == t ]] || die "the secondary is not in recovery: '$recovery'"
note "primary: synchronous_standby_names = '$names', synchronous_commit = on;" \
  "the secondary is a standby"

# -- failovers ----------------------------------------------------------------

# Fails over from port `from` to port `to` (`how`: failover's option, if
# any), then checks the rows 1..`rows` are there through the connection
# string, which now writes on `to`.
failover() {
  local n=$1 from=$2 to=$3 rows=$4 how=("${@:5}") t count port
  die_where="in failover $n"
  t=$(now_ms)
  run_ha failover "${how[@]}"
  failover_ms[n]=$(($(now_ms) - t))
  [[ $last == "primary=127.0.0.1:$to" ]] \
    || die "failover printed '$last', expected primary=127.0.0.1:$to"
  note "failover $n: primary moved from port $from to $to in" \
    "$(seconds "${failover_ms[n]}") s ($(grep -m1 ' promoted ' "$tmp/failover.err"))"
  count=$(sql "$conn" -c "SELECT count(*) FROM ha_probe WHERE id <= $rows") \
    || die "psql through '$conn' failed after failover $n"
  [[ $count == "$rows" ]] \
    || die "after failover $n, $count of the rows 1..$rows are left"
  port=$(sql "$conn" \
    -c "INSERT INTO ha_probe VALUES ($((rows + 1)), 'after failover $n')" \
    -c "SELECT inet_server_port()") \
    || die "insert through '$conn' failed after failover $n"
  [[ $port == "$to" ]] \
    || die "after failover $n the connection string wrote on port $port," \
      "not on the new primary $to"
  note "after failover $n: rows 1..$rows are there, row $((rows + 1))" \
    "inserted on port $to"
}

# True once `status` shows port `1` as secondary and port `2` as primary,
# both in the state assigned to them (and every pg_autoctl running).
roles_are() {
  run_ha status 2>/dev/null || return 1
  [[ $(ports_in_state "$out" secondary) == "$1" \
    && $(ports_in_state "$out" primary) == "$2" ]]
}

failover_ms=()
failover 1 "$primary" "$secondary" 1
# Back, killing the whole node of the new primary (pg_autoctl and Postgres
# -9): only possible once the first killed node rejoined as secondary.
failover 2 "$secondary" "$primary" 2 --whole-node
t=$(now_ms)
for ((i = 0; i < 120; i++)); do
  roles_are "$secondary" "$primary" && break
  sleep 0.5
done
roles_are "$secondary" "$primary" \
  || die "the killed node (port $secondary) is not back as secondary 60 s" \
    "after failover 2: $out"
note "failover 2: the killed node (port $secondary) is back as secondary" \
  "$(seconds $(($(now_ms) - t))) s after the promotion"

# -- stop, start again --------------------------------------------------------

die_where="in stop"
run_ha stop
poll 5 no_formation_processes \
  || die "processes left after stop: $(formation_processes)"
rc=0
"$ha" status >/dev/null 2>"$tmp/status.err" || rc=$?
((rc != 0)) || die "status exits 0 after stop"
note "stop left no process under $HA_DIR; status then exits $rc"

die_where="in the restart"
t0=$(now_ms)
run_ha start
restart_ms=$(($(now_ms) - t0))
[[ $last == "$conn" ]] \
  || die "start after stop printed '$last', not '$conn'"
count=$(sql "$conn" -c "SELECT count(*) FROM ha_probe") \
  || die "psql through '$conn' failed after the restart"
[[ $count == 3 ]] || die "after the restart $count rows are left, not 3"
note "start after stop took $(seconds "$restart_ms") s; the 3 rows are there"
run_ha stop
poll 5 no_formation_processes \
  || die "processes left after the second stop: $(formation_processes)"

die_where=""
echo "ha_cluster: all passed; start $(seconds "$start_ms") s, failover" \
  "$(seconds "${failover_ms[1]}") s, whole node $(seconds "${failover_ms[2]}") s" \
  "(each including the wait for an in-sync secondary), restart" \
  "$(seconds "$restart_ms") s"
