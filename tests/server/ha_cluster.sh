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
# secondary. Meanwhile a writer inserts rows through the connection string
# without pause, before, during and after both failovers. Every write is a
# client's: keyed by its row id, retried with the same id while the
# formation leaves it unacknowledged (client_sql), and afterwards every
# acknowledged row is there once, none lost. `stop` leaves no process
# behind, and `start` brings the same data back. Prints the time `start`,
# each failover and each wait took, and how many tries each retried write
# needed. Needs the packages postgresql-15-auto-failover and
# pg-auto-failover-cli (scripts/install-deps); fails, never skips, without
# them.
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
# ha-cluster's own liveness bounds (a formation ready, a promotion): 240 s,
# 20x the longest measured on a machine busy with builds and tests (a
# whole node's promotion, 11 s), rather than its default 120 s.
export HA_TIMEOUT=240
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

# Polls `command...` every 0.5 s until it succeeds and sets `waited_ms` to
# how long that took; fails once `seconds` have passed. A liveness bound
# only (something hangs), at least 10x what the wait takes on a quiet
# machine.
wait_until() {
  local seconds=$1 t0
  shift
  t0=$(now_ms)
  until "$@"; do
    (($(now_ms) - t0 < seconds * 1000)) || return 1
    sleep 0.5
  done
  waited_ms=$(($(now_ms) - t0))
}

# -- a client of the formation ------------------------------------------------

# What is not acknowledged is retried with the same key up to tries_max
# times, with retry_pause between the tries: about 3 min in all, over 10x
# the longest time without a writable node measured here on a machine
# busy with builds and tests (whole node: 13 s at a load of 8).
tries_max=40

# The pause after try `n`: 0.1 s after the first, twice as long after each
# next, at most 5 s.
retry_pause() {
  sleep "$(awk -v n="$1" 'BEGIN { s = 0.1 * 2 ^ (n - 1); print s < 5 ? s : 5 }')"
}

# Why psql's answer (exit status `rc`, stderr `err`) leaves the statement
# unacknowledged, as one word: `sync-rep` (the commit's wait for the
# synchronous standby was cut short: committed locally, perhaps never
# replicated; psql may even exit 0 after a cancel), `connection` (no
# writable node reached, or the connection was lost, as when a primary
# dies or is demoted: psql exits 2), `read-only` (SQLSTATE 25006: the node
# took the connection as primary and is one no more). Fails for every
# other answer: no retry can change it.
#
# sync-rep is what a write right after a promotion may get: the old
# primary's pg_autoctl restarts its Postgres in place, still a primary,
# until the monitor has it demoted a few seconds later (pg_ctl stop --mode
# fast, which ends the wait). libpq picks it if it comes first in the
# connection string; the row it committed locally is then rewound away.
unacknowledged_because() {
  local rc=$1 err=$2
  if [[ $err == *"wait for synchronous replication"* ]]; then
    echo sync-rep
  elif ((rc == 2)); then
    echo connection
  elif ((rc == 3)) && [[ $err == *25006* ]]; then
    echo read-only
  else
    return 1
  fi
}

# client_sql WHAT PSQL-ARGS...: psql through the connection string `conn`,
# as a client of the formation must run it: until acknowledged (exit 0, no
# warning about synchronous replication), retrying what
# unacknowledged_because names, at most tries_max tries; every other
# failure dies at once. The statements must be safe to repeat (a write
# carries its key). Sets `answer` (stdout), `tries`, `tried_ms` and
# `retried_for` (the reasons, comma-separated, empty without retries).
client_sql() {
  local what=$1 rc err reason t0 errfile=$tmp/client_sql.$BASHPID.err
  shift
  t0=$(now_ms)
  tries=0 retried_for=''
  while :; do
    tries=$((tries + 1)) rc=0
    answer=$(sql "$conn" -v VERBOSITY=verbose "$@" 2>"$errfile") || rc=$?
    err=$(<"$errfile")
    if ((rc == 0)) && [[ $err != *"wait for synchronous replication"* ]]; then
      break
    fi
    reason=$(unacknowledged_because "$rc" "$err") \
      || die "$what through '$conn': psql exited $rc: $err"
    retried_for+=${retried_for:+,}$reason
    ((tries < tries_max)) \
      || die "$what: still unacknowledged after $tries tries" \
        "($retried_for): $err"
    retry_pause "$tries"
  done
  tried_ms=$(($(now_ms) - t0))
}

# A list of reasons, "a,a,b", as "2 a, 1 b".
tally() {
  tr ',' '\n' <<<"$1" | sort | uniq -c \
    | awk '{ printf "%s%d %s", (NR > 1 ? ", " : ""), $1, $2 }'
}

# How the last client_sql went, for a note: "1 try" or "4 tries
# (2 connection, 1 read-only), 3.2 s".
tried() {
  if ((tries == 1)); then
    echo "1 try"
  else
    echo "$tries tries ($(tally "$retried_for")), $(seconds "$tried_ms") s"
  fi
}

# Writes row `id` with note `note` (no quotes) and reads the port of the
# node that took it into `answer`. The row id is the write's idempotency
# key: a retry of a write that did commit finds its row and counts the
# commit in `commits` instead of adding a row. It updates, rather than
# doing nothing, so that its own commit waits for the synchronous standby
# and, once acknowledged, vouches for the first try's commit too (a commit
# that writes nothing does not wait).
write_row() {
  client_sql "writing row $1" \
    -c "INSERT INTO ha_probe AS p (id, note) VALUES ($1, '$2')
          ON CONFLICT (id) DO UPDATE SET commits = p.commits + 1" \
    -c "SELECT inet_server_port()"
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
client_sql "creating the table" -c "CREATE TABLE IF NOT EXISTS ha_probe (
  id int PRIMARY KEY, note text NOT NULL, commits int NOT NULL DEFAULT 1)"
write_row 1 "before the failovers"
first=$answer
[[ $first == "$port_a" || $first == "$port_b" ]] \
  || die "wrote through the connection string on port '$first'," \
    "not $port_a or $port_b"
note "created a table and inserted a row through it (node on port $first;" \
  "$(tried))"

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

# -- a writer through the failovers -------------------------------------------

# Rows from writer_first_id on, one after another (write_row) until
# $tmp/writer.stop appears: writes land on a primary about to die, while
# there is none, right at each promotion and while the killed node rejoins
# and synchronous replication comes back on. Each acknowledged row goes to
# $tmp/writer.acked as "id tries ms reasons"; a write the formation keeps
# from being acknowledged fails the writer.
writer_first_id=1001
writer() {
  local id=$writer_first_id
  die_where="in the writer"
  while [[ ! -e $tmp/writer.stop ]]; do
    write_row "$id" "written by the writer"
    echo "$id $tries $tried_ms ${retried_for:--}" >>"$tmp/writer.acked"
    id=$((id + 1))
    sleep 0.1
  done
}
: >"$tmp/writer.acked"
writer 2>"$tmp/writer.err" &
writer_pid=$!
on_exit_kill "$writer_pid"
writer_acked() { wc -l <"$tmp/writer.acked"; }
writer_wrote() { (($(writer_acked) >= 1)); }
wait_until 60 writer_wrote \
  || die "the writer has no row acknowledged after 60 s:" \
    "$(tail -n 3 "$tmp/writer.err")"
note "the writer runs (first row acknowledged $(seconds "$waited_ms") s" \
  "after it started)"

# -- failovers ----------------------------------------------------------------

# Fails over from port `from` to port `to` (`how`: failover's option, if
# any), then checks the rows 1..`rows` are there through the connection
# string, which now writes on `to`.
failover() {
  local n=$1 from=$2 to=$3 rows=$4 how=("${@:5}") t
  die_where="in failover $n"
  t=$(now_ms)
  run_ha failover "${how[@]}"
  failover_ms[n]=$(($(now_ms) - t))
  [[ $last == "primary=127.0.0.1:$to" ]] \
    || die "failover printed '$last', expected primary=127.0.0.1:$to"
  note "failover $n: primary moved from port $from to $to in" \
    "$(seconds "${failover_ms[n]}") s ($(grep -m1 ' promoted ' "$tmp/failover.err"))"
  client_sql "reading rows 1..$rows after failover $n" \
    -c "SELECT count(*) FROM ha_probe WHERE id <= $rows"
  [[ $answer == "$rows" ]] \
    || die "after failover $n, $answer of the rows 1..$rows are left"
  write_row $((rows + 1)) "after failover $n"
  [[ $answer == "$to" ]] \
    || die "after failover $n the connection string wrote on port $answer," \
      "not on the new primary $to"
  note "after failover $n: rows 1..$rows are there, row $((rows + 1))" \
    "inserted on port $to ($(tried))"
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
# The killed node's rejoin (pg_rewind, catching up) ends 5-12 s after
# failover returned (which restarted the node's pg_autoctl) on a machine
# busy with builds and tests.
wait_until 180 roles_are "$secondary" "$primary" \
  || die "the killed node (port $secondary) is not back as secondary 180 s" \
    "after failover 2: $out"
note "failover 2: the killed node (port $secondary) is back as secondary" \
  "$(seconds "$waited_ms") s after failover returned"

# -- what the writer got acknowledged -----------------------------------------

die_where="in the writer's audit"
touch "$tmp/writer.stop"
reap "$writer_pid"
((status == 0)) || die "the writer failed: $(tail -n 5 "$tmp/writer.err")"
acked=$(writer_acked)
# It writes one row after another and stops only at an acknowledgement, so
# its rows are exactly ids writer_first_id.. in a row: the present ones are
# the acknowledged ones, none lost, none added.
writer_rows() {
  client_sql "reading the writer's rows $1" \
    -c "SELECT count(*), count(DISTINCT id), coalesce(min(id), 0),
               coalesce(max(id), 0)
          FROM ha_probe WHERE id >= $writer_first_id"
  local last_id=$((writer_first_id + acked - 1))
  [[ $answer == "$acked|$acked|$writer_first_id|$last_id" ]] \
    || die "the writer's $acked acknowledged rows, ids" \
      "$writer_first_id..$last_id, $1; the table holds (rows|ids|min|max)" \
      "$answer"
}
writer_rows "after the failovers"
client_sql "reading the rows written twice" \
  -c "SELECT count(*) FROM ha_probe WHERE id >= $writer_first_id AND commits > 1"
committed_twice=$answer
note "the writer's $acked acknowledged rows are there, each once; $(awk '
  $2 > 1 { retried++; if ($2 > most) most = $2; if ($3 > longest) longest = $3 }
  END { printf "%d needed retries (the most: %d tries, the longest: %.1f s)",
        retried, most, longest / 1000 }' "$tmp/writer.acked");" \
  "$committed_twice found the row of an earlier, unacknowledged try"
# Each retried write, for whoever wonders whether the retries ran.
while read -r id n ms reasons; do
  ((n > 1)) || continue
  echo "ha_cluster: row $id: $n tries ($(tally "$reasons")), $(seconds "$ms") s"
done <"$tmp/writer.acked"

# -- stop, start again --------------------------------------------------------

die_where="in stop"
run_ha stop
wait_until 30 no_formation_processes \
  || die "processes left 30 s after stop: $(formation_processes)"
rc=0
"$ha" status >/dev/null 2>"$tmp/status.err" || rc=$?
((rc != 0)) || die "status exits 0 after stop"
note "stop left no process under $HA_DIR (the last one gone" \
  "$(seconds "$waited_ms") s after stop returned); status then exits $rc"

die_where="in the restart"
t0=$(now_ms)
run_ha start
restart_ms=$(($(now_ms) - t0))
[[ $last == "$conn" ]] \
  || die "start after stop printed '$last', not '$conn'"
client_sql "reading rows 1..3 after the restart" \
  -c "SELECT count(*) FROM ha_probe WHERE id < $writer_first_id"
[[ $answer == 3 ]] || die "after the restart $answer rows are left, not 3"
writer_rows "after the restart"
note "start after stop took $(seconds "$restart_ms") s; the 3 rows and the" \
  "writer's $acked are there"
run_ha stop
wait_until 30 no_formation_processes \
  || die "processes left 30 s after the second stop: $(formation_processes)"

die_where=""
echo "ha_cluster: all passed; start $(seconds "$start_ms") s, failover" \
  "$(seconds "${failover_ms[1]}") s, whole node $(seconds "${failover_ms[2]}") s" \
  "(each including the wait for an in-sync secondary), restart" \
  "$(seconds "$restart_ms") s"
