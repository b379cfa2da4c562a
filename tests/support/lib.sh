#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Helpers shared by the end-to-end test scripts under tests/; source it
# first thing (it installs the EXIT trap that undoes what a script
# registered with the on_exit_* functions below).

# -- processes ----------------------------------------------------------------

# True while `pid` runs (a zombie does not count).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# Waits up to `seconds` (may be fractional: 0.5) for `pid` to end.
wait_gone() {
  local pid=$1 tenths i
  tenths=$(awk -v s="$2" 'BEGIN { printf "%d", s * 10 }')
  for ((i = 0; i < tenths; i++)); do
    alive "$pid" || return 0
    sleep 0.1
  done
  ! alive "$pid"
}

# Waits for background job `pid` and sets `status` to its exit status. Not
# in a $(...) subshell: only this shell can wait for its children.
reap() {
  status=0
  wait "$1" || status=$?
}

# Polls `command...` every 0.1 s for up to `seconds`; true once it succeeds,
# and then `poll_seconds` says how long that took ("1.3"), for the script to
# print. `seconds` is a liveness bound ("if it has not happened by then,
# something hangs"), never a speed: at least 10x what the wait takes on a
# quiet machine. A slow command stretches it: it counts tries, not time.
poll() {
  local tenths=$(($1 * 10)) i started
  started=$(now_us)
  shift
  for ((i = 0; i < tenths; i++)); do
    "$@" && break
    sleep 0.1
  done
  ((i < tenths)) || "$@" || return
  # shellcheck disable=SC2034 # read by the scripts
  poll_seconds=$(seconds_since "$started")
}

# Microseconds since the epoch, from bash's own clock (no process).
now_us() {
  local t=$EPOCHREALTIME
  echo "${t//[^0-9]/}"
}

# Seconds since `started` (a now_us), with one decimal: "1.3".
seconds_since() {
  local tenths=$((($(now_us) - $1) / 100000))
  echo "$((tenths / 10)).$((tenths % 10))"
}

# True if `pid` is a child of this shell (running or a zombie): a pid that
# ended and was reused by some other process is never signalled.
is_child() {
  local stat ppid
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) } # after the command name, which may hold spaces
  read -r _ ppid _ <<<"$stat"
  [[ $ppid == "$$" ]]
}

# Ends child `pid` if it still runs: SIGTERM, SIGKILL after `seconds` (10);
# then reaps it, without bash's "Terminated" notice. Never fails.
stop_process() {
  local pid=$1 seconds=${2:-10}
  [[ -n $pid ]] && is_child "$pid" || return 0
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" "$seconds" || kill -KILL "$pid" 2>/dev/null || true
  fi
  { wait "$pid"; } 2>/dev/null || true
}

# The postmaster of data directory `pgdata`, if it runs: thawed (a fault
# may have left it and its backends SIGSTOPped), fast shutdown (SIGINT),
# SIGKILL after 20 s. Never fails.
stop_postgres() {
  local pm child
  pm=$(head -n1 "$1/postmaster.pid" 2>/dev/null) || return 0
  [[ $pm =~ ^[0-9]+$ ]] && alive "$pm" || return 0
  [[ $(cat "/proc/$pm/comm" 2>/dev/null) == postgres ]] || return 0
  for child in $(ps -o pid= --ppid "$pm" 2>/dev/null); do
    kill -CONT "$child" 2>/dev/null || true
  done
  kill -CONT "$pm" 2>/dev/null || true
  kill -INT "$pm" 2>/dev/null || true
  wait_gone "$pm" 20 || kill -KILL "$pm" 2>/dev/null || true
}

# -- failing ------------------------------------------------------------------

# The name failures are reported under: the script's file name without .sh.
script_name=$(basename "$0" .sh)
# Where the script is, e.g. "in step 3"; die reports it when set.
die_where=""

# Prints "NAME: FAILED[ WHERE]: message..." on stderr and exits 1; the EXIT
# trap then stops what was registered, shows the logs and repeats the
# message after them (a CI log cut in the middle keeps its end).
die_message=""
die() {
  die_message="$script_name: FAILED${die_where:+ $die_where}: $*"
  echo "$die_message" >&2
  exit 1
}

# -- on exit ------------------------------------------------------------------

exit_pids=() exit_clusters=() exit_hooks=() exit_logs=() exit_paths=()

# Children to stop on exit (stop_process), latest first. Every other
# background job still running is stopped after them.
on_exit_kill() { exit_pids+=("$@"); }

# Postgres data directories (PGDATA) whose postmaster to stop on exit,
# after the processes (stop_postgres).
on_exit_stop_postgres() { exit_clusters+=("$@"); }

# A command to run on exit after the processes and clusters are stopped,
# before the logs are shown; it may change `exit_status`, the status the
# script exits with.
on_exit_run() { exit_hooks+=("$(printf '%q ' "$@")"); }

# Logs to show if the script fails: files or glob patterns (expanded on
# exit), each shown once, if not empty, by show_log.
on_exit_show_log() { exit_logs+=("$@"); }

# Files and directories to remove on exit, last.
on_exit_remove() { exit_paths+=("$@"); }

# How a log is shown on failure; a script may redefine it after sourcing.
show_log() {
  echo "--- ${1##*/} (last 40 lines) ---"
  tail -n 40 "$1"
}

# The EXIT trap: stops processes and clusters, runs the hooks, shows the
# logs on failure, removes the temp paths, exits with the script's status.
on_exit() {
  exit_status=$?
  set +e
  local i pid dir hook pattern log
  local -A seen_logs=()
  for ((i = ${#exit_pids[@]} - 1; i >= 0; i--)); do
    stop_process "${exit_pids[i]}"
  done
  for pid in $(jobs -p); do
    stop_process "$pid"
  done
  for dir in "${exit_clusters[@]}"; do
    stop_postgres "$dir"
  done
  for hook in "${exit_hooks[@]}"; do
    eval "$hook"
  done
  if ((exit_status != 0)); then
    for pattern in "${exit_logs[@]}"; do
      while IFS= read -r log; do
        [[ -s $log && -z ${seen_logs[$log]:-} ]] || continue
        seen_logs[$log]=1
        show_log "$log" >&2
      done < <(compgen -G "$pattern")
    done
    [[ -z $die_message ]] || echo "$die_message" >&2
  fi
  rm -rf -- "${exit_paths[@]}"
  exit "$exit_status"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- chargeonce-server --------------------------------------------------------

# The chargeonce-server start_server runs; set by the script.
server_bin=${server_bin:-}
# The directory start_server runs servers in; empty: the script's own.
server_dir=""
# How long start_server waits for a server to listen: a liveness bound. On
# Postgres it listens in under a second; an embedded cluster's initdb took
# 5.5 s on a loaded machine (load 13 on two cores).
server_start_seconds=120

# Starts `$server_bin args... --port-file=PREFIX.port` in the background (in
# server_dir if set), with stdout and stderr in PREFIX.log. Returns once the
# server listens: it writes the port file (by rename, never half) after
# every listener, HTTP included, is up. Dies with the log's last lines if
# the server exits first or does not listen within server_start_seconds.
# Sets server_pid, server_log, server_port_file and server_port (line 1: the
# all-roles port, 0 with role ports only); registers the pid (on_exit_kill)
# and the log (on_exit_show_log).
start_server() {
  local prefix=$1 name=${1##*/} i
  shift
  [[ -x $server_bin ]] || die "server_bin is not an executable: '$server_bin'"
  server_log=$prefix.log server_port_file=$prefix.port
  rm -f "$server_port_file"
  (cd "${server_dir:-.}" \
    && exec "$server_bin" "$@" --port-file="$server_port_file") \
    >"$server_log" 2>&1 &
  server_pid=$!
  on_exit_kill "$server_pid"
  on_exit_show_log "$server_log"
  for ((i = 0; i < server_start_seconds * 10; i++)); do
    [[ -f $server_port_file ]] && break
    if ! alive "$server_pid"; then
      reap "$server_pid"
      die "server $name exited $status before listening:" \
        "$(tail -n 5 "$server_log")"
    fi
    sleep 0.1
  done
  [[ -f $server_port_file ]] \
    || die "server $name does not listen after $server_start_seconds s"
  server_port=$(head -n1 "$server_port_file")
  [[ $server_port =~ ^[0-9]+$ ]] \
    || die "line 1 of $name's port file is no port: $(cat "$server_port_file")"
}

# The port of `role` (gateway, worker, admin, http) in the port file of the
# server started last; empty if it has none.
port_of() {
  sed -n "s/^$1=//p" "$server_port_file"
}

# SIGTERM to server `pid`, which must exit 0 within `seconds` (30); dies
# otherwise.
stop_server() {
  local pid=$1 seconds=${2:-30}
  kill -TERM "$pid"
  wait_gone "$pid" "$seconds" \
    || die "the server (pid $pid) still runs $seconds s after SIGTERM"
  reap "$pid"
  ((status == 0)) \
    || die "the server (pid $pid) exited $status after SIGTERM, expected 0"
}

# -- chargeonce-cli -----------------------------------------------------------

# The --timeout scripts give chargeonce-cli: a liveness bound, never a speed.
# An answer takes a few ms on a quiet machine (a CLI process about 40 ms);
# with suites side by side on two cores, answers have come 5 s late.
# shellcheck disable=SC2034 # read by the scripts
cli_timeout=60s

# -- data ---------------------------------------------------------------------

# A random 12-digit chat id, so reruns and other suites never collide.
random_chat() {
  local n
  n=$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')
  echo $((n % 900000000000 + 100000000000))
}
