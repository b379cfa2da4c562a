#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Hostile clients against chargeonce-server on the Postgres of
# CHARGEONCE_TEST_DSN (set by scripts/test): first one server with the three
# role ports (gateway, worker, admin), then briefly one in the plain
# all-roles `--port` mode.
#
# usage: hostile.sh CHARGEONCE-SERVER CHARGEONCE-CLI
#
# With role ports the all-roles API is not published (CAF 0.17 lets a peer
# address any published actor by its id): the port file's first line is 0
# and the server listens on exactly the three role ports; every command goes
# to its role's port. After a warm-up of about 100 ordinary CLI operations
# the server's VmRSS is the baseline. Then every role port is attacked:
# garbage bytes, a CAF client asking for the wrong interface, out-of-range
# values, clients that connect and never speak, clients killed with requests
# in flight, 1,000 connections opened and closed, and BASP headers that
# announce a huge payload. After each attack a "canary" (a fresh chat:
# create-chat on the admin port, reserve and status on the gateway port,
# start and commit on the worker port) must still work and the server must
# still run. At the end VmRSS must be back near the baseline and SIGTERM
# must stop the server with exit 0 within 30 s. Last, a second server is
# started with only `--port=0`: it must listen on that port alone, survive
# the garbage of step 1 and serve a canary there, and stop on SIGTERM.
#
# A check whose failure makes the next steps meaningless (the server died, a
# canary failed) stops the test at once. The others (a reply of the wrong
# shape, memory that did not come back) are reported when they happen and
# fail the test at the end, so that one finding does not hide the rest.
#
# The database is shared with the C++ integration tests: chats get random
# 12-digit ids, and every reservation made here is committed or cancelled
# before the end. The temp dir is made under $PWD (ctest: the build dir).
set -euo pipefail
# The last command of a pipeline runs in this shell: `... | garbage` counts
# and fails here, not in a subshell.
shopt -s lastpipe
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 2)) || die "usage: hostile.sh CHARGEONCE-SERVER CHARGEONCE-CLI"
server_bin=$(realpath "$1")
cli_bin=$(realpath "$2")
[[ -x $server_bin ]] || die "not an executable: $server_bin"
[[ -x $cli_bin ]] || die "not an executable: $cli_bin"
command -v jq >/dev/null || die "jq is required (apt-get install jq)"
# Never pass vacuously: without a database nothing here can be tested.
[[ -n ${CHARGEONCE_TEST_DSN:-} ]] \
  || die "CHARGEONCE_TEST_DSN is not set (a libpq DSN of a" \
    "throwaway database; scripts/test sets it)"
dsn=$CHARGEONCE_TEST_DSN

# Memory the server may keep beyond the warm-up baseline (KiB): chat actors
# of the canaries stay alive until idle-timeout, allocator slack.
rss_slack_kib=$((30 * 1024))
# What the "huge payload" headers of step 7 announce. CAF 0.17.6 allocates
# and zero-fills a buffer of that size before a single payload byte arrives;
# it is kept modest so that the test does not endanger the machine (BASP
# allows up to 4 GiB per connection).
huge_payload_bytes=$((256 * 1024 * 1024))
# Warm-up: chats of ten operations each; step 6: status calls after the
# churn. Each CLI call costs ~40 ms (a process and a CAF handshake), so
# these two dominate the run time.
warm_chats_n=10
status_calls=100
# The ports attacked in the split mode; `api` is the plain-mode server's.
roles=(gateway worker admin)

tmp=$(mktemp -d "$PWD/hostile.XXXXXX")
on_exit_remove "$tmp"
# Every background process we start (the EXIT trap ends what still runs).
server_pid="" server_log="$tmp/server.log" idle_pid="" victims=()
current_step="setup"
step_started=0
test_started=0
timings=()  # "step: ms", one per finished step
findings=() # failed checks that did not stop the test
declare -A port

# -- helpers ------------------------------------------------------------------

now_ms() {
  echo $(($(date +%s%N) / 1000000))
}

test_started=$(now_ms)

# Ends the current step: prints and records how long it took.
end_step() {
  ((step_started > 0)) || return 0
  local took=$(($(now_ms) - step_started))
  note "step $current_step took ${took} ms"
  timings+=("$current_step: ${took} ms")
  step_started=0
}

step() {
  end_step
  current_step=${1%%:*}
  die_where="in step $current_step"
  step_started=$(now_ms)
  printf '\n== step %s (t=%d ms)\n' "$1" $((step_started - test_started))
}

# Dies; says so when the cause is that the server is gone.
fail() {
  local why=""
  if [[ -n $server_pid ]] && ! alive "$server_pid"; then
    reap "$server_pid"
    server_pid=""
    why=" (the server died: exit status $status)"
  fi
  die "$*$why"
}

# A failed check that does not stop the test; it fails at the end.
finding() {
  echo "hostile: FAILED in step $current_step: $*" >&2
  findings+=("step $current_step: $*")
}

note() {
  echo "   $*"
}

mib() {
  awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'
}

# -- the server ---------------------------------------------------------------

# Used inside $(...): exits that subshell, and set -e this shell, with a
# message when the server is gone.
require_proc() {
  [[ -r /proc/$server_pid/status ]] && alive "$server_pid" && return 0
  echo "hostile: FAILED in step $current_step: the server died" >&2
  exit 1
}

# The server's resident set (KiB), or its peak so far with `VmHWM`.
memory_kib() {
  require_proc
  awk -v f="${1:-VmRSS}:" '$1 == f { print $2 }' "/proc/$server_pid/status"
}

# How many file descriptors the server has open (sockets, Postgres, logs).
server_fds() {
  require_proc
  local fds=("/proc/$server_pid/fd/"*)
  echo "${#fds[@]}"
}

fds_at_most() {
  (($(server_fds) <= $1))
}

fds_at_least() {
  (($(server_fds) >= $1))
}

rss_at_most() {
  (($(memory_kib) <= $1))
}

# The server's TCP sockets, one "STATE PORT" a line: the sockets among its
# fds that /proc/net/tcp{,6} lists, with their state (hex, 0A: LISTEN) and
# local port.
server_sockets() {
  require_proc
  local -A own=()
  local fd link _sl local_addr _rem st inode
  for fd in "/proc/$server_pid/fd/"*; do
    link=$(readlink "$fd" 2>/dev/null) || continue
    [[ $link =~ ^socket:\[([0-9]+)\]$ ]] && own[${BASH_REMATCH[1]}]=1
  done
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null \
    | while read -r _sl local_addr _rem st _ _ _ _ _ inode _; do
      [[ -n ${own[$inode]:-} ]] || continue
      echo "$st $((16#${local_addr##*:}))"
    done
}

# The TCP ports the server listens on, ascending, space-separated.
listening_ports() {
  server_sockets | awk '$1 == "0A" { print $2 }' | sort -n | paste -sd' '
}

# True once the server holds no connection on the port of `role` (one
# whose client went away but which the server has not closed yet counts).
no_connections_on() {
  local sockets
  sockets=$(server_sockets)
  ! awk -v p="${port[$1]}" '$1 != "0A" && $2 == p { n++ } END { exit !n }' \
    <<<"$sockets"
}

# Fills `port` from the port file of the server started last: line 1 is
# `api` (0 when not published), then `role=port` lines.
read_ports() {
  local line
  port=()
  port[api]=$server_port
  while read -r line; do
    [[ $line =~ ^(gateway|worker|admin)=([0-9]+)$ ]] \
      || fail "unexpected line '$line' in the port file"
    port[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
  done < <(tail -n +2 "$server_port_file")
}

# Dies unless the server still runs; `after` says after what.
require_alive() {
  alive "$server_pid" && return 0
  reap "$server_pid"
  server_pid=""
  fail "the server died after $1 (exit status $status)"
}

# Warnings and errors in the server log (or `file`) from line `from` on
# (1-based).
log_problems() {
  tail -n "+$1" "${2:-$server_log}" \
    | grep -E '\[(warning|error|critical)\]' || true
}

log_lines() {
  wc -l <"$server_log"
}

# -- the CLI ------------------------------------------------------------------

# Runs the CLI against the port of `role`; its stdout goes to `out`, its exit
# status to `rc`. Never fails by itself.
cli_run() {
  local role=$1
  shift
  rc=0
  out=$("$cli_bin" --server="127.0.0.1:${port[$role]}" \
    --timeout="$cli_timeout" "$@" 2>"$tmp/cli.err") || rc=$?
}

# Like cli_run, but dies unless the exit status is `want_rc` and the output
# one JSON object.
cli_expect() {
  local want_rc=$1 role=$2
  shift 2
  cli_run "$role" "$@"
  ((rc == want_rc)) || fail "'chargeonce-cli $*' on the $role port exited" \
    "$rc, expected $want_rc: $out $(cat "$tmp/cli.err")"
  jq -e 'type == "object"' <<<"$out" >/dev/null 2>&1 \
    || fail "'chargeonce-cli $*' did not print one JSON object: $out"
}

# True if the last CLI output satisfies the jq filter (extra args go to jq).
out_is() {
  jq -e "$@" <<<"$out" >/dev/null 2>&1
}

# Like out_is, or dies with `message` and the output.
expect_out() {
  local message=$1
  shift
  out_is "$@" || fail "$message: $out"
}

# -- the canary ---------------------------------------------------------------

# A normal billing cycle for a fresh chat through the proper role ports, or
# all through the port of `role` if given (the plain mode's `api`): the
# other clients of the server must not notice any attack.
canary() {
  local after=$1 admin=${2:-admin} gateway=${2:-gateway} worker=${2:-worker}
  local chat id started
  require_alive "$after"
  started=$(now_ms)
  chat=$(random_chat)
  cli_expect 0 "$admin" create-chat --chat="$chat" --balance=2
  expect_out "canary create-chat" '.balance == 2 and .reservation == null'
  cli_expect 0 "$gateway" reserve --chat="$chat" --kind=image \
    --request-id=canary
  expect_out "canary reserve" '.status == "queued" and .held.balance == 1'
  id=$(jq .id <<<"$out")
  cli_expect 0 "$worker" start --chat="$chat" --reservation="$id"
  expect_out "canary start" '.status == "in_progress"'
  cli_expect 0 "$worker" commit --chat="$chat" --reservation="$id"
  expect_out "canary commit" ".reservation == $id and .charged.balance == 1"
  cli_expect 0 "$gateway" status --chat="$chat"
  expect_out "canary status" '.balance == 1 and .reservation == null'
  require_alive "the canary"
  note "canary after $after${2:+ (all on the $2 port)}: chat $chat" \
    "reserved, started, committed in $(($(now_ms) - started)) ms; server alive"
}

# -- raw TCP ------------------------------------------------------------------

# Sends stdin to `role`'s port on a fresh connection and closes it. False
# only if the connection cannot be opened: write errors (the server hung up
# on our garbage before reading it all) are expected.
send_raw() {
  local fd
  { exec {fd}<>"/dev/tcp/127.0.0.1/${port[$1]}"; } 2>/dev/null || return 1
  cat 1>&"$fd" 2>/dev/null || true
  exec {fd}>&-
}

# Prints a BASP header (CAF 0.17: 32 bytes, network byte order): operation,
# two padding bytes, flags, payload length, operation data, source actor,
# destination actor. Arguments in hex: `op` and `flags` one byte,
# `payload_len` 4 bytes, `op_data`, `source`, `dest` 8 bytes each.
basp_header() {
  local op=$1 flags=$2 len=$3 data=$4 src=$5 dst=$6 hex escaped="" i
  hex=$(printf '%02x0000%02x%08x%016x%016x%016x' "0x$op" "0x$flags" \
    "0x$len" "0x$data" "0x$src" "0x$dst")
  for ((i = 0; i < ${#hex}; i += 2)); do
    escaped+="\\x${hex:i:2}"
  done
  printf '%b' "$escaped"
}

# 4 KiB of random bytes whose first byte is no BASP operation (0..6). Pure
# /dev/urandom starts with a header the server accepts (operation 0, 2 or
# 3 with a random payload length of up to 4 GiB) in about 1 of 85 tries;
# that case is step 7's, where it is deterministic.
random_garbage() {
  local first
  first=$(od -An -N1 -tu1 /dev/urandom | tr -d ' ')
  printf '%b' "\\x$(printf '%02x' $((first % 249 + 7)))"
  head -c 4095 /dev/urandom
}

# -- on exit ------------------------------------------------------------------

# Run by the EXIT trap once the processes are stopped: the timings, and the
# findings, which fail the test.
summarize() {
  if ((${#timings[@]} > 0)); then
    printf '\n== timings\n'
    printf '   %s\n' "${timings[@]}"
  fi
  if ((${#findings[@]} > 0)); then
    printf '\n== %d failed check(s)\n' "${#findings[@]}" >&2
    printf '   %s\n' "${findings[@]}" >&2
    ((exit_status != 0)) || exit_status=1
  fi
}
on_exit_run summarize

# What the EXIT trap shows of a server log on failure (instead of lib.sh's
# last 40 lines).
show_log() {
  echo "--- ${1##*/}: warnings and errors ---"
  log_problems 1 "$1" | tail -n 20
  echo "--- ${1##*/}: last 10 lines ---"
  tail -n 10 "$1"
}
trap 'echo "hostile: interrupted in step $current_step" >&2; exit 130' INT
trap 'echo "hostile: interrupted in step $current_step" >&2; exit 143' TERM

# -- the garbage attack (steps 1 and 9) ---------------------------------------

http=$'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'
post=$'POST /topup HTTP/1.0\r\nContent-Length: 99999999\r\n\r\n{'
# TLS 1.2 ClientHello record header and the start of its body.
tls='\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03'

# Sends stdin as garbage `what` to the port of `role`, counting in `sent`.
garbage() {
  if ! send_raw "$1"; then
    require_alive "$2 on the $1 port"
    fail "cannot connect to the $1 port (sending $2)"
  fi
  ((++sent))
}

# Garbage of every kind, each on a fresh connection, to the port of `role`.
garbage_attack() {
  local role=$1 n dst
  sent=0
  for ((n = 0; n < 5; n++)); do
    random_garbage | garbage "$role" "random bytes"
  done
  printf '%s' "$http" | garbage "$role" "an HTTP GET"
  printf '%s' "$post" | garbage "$role" "an HTTP POST"
  printf '%b' "$tls" | garbage "$role" "a TLS ClientHello"
  printf 'SSH-2.0-OpenSSH_9.2\r\n' | garbage "$role" "an SSH banner"
  printf '\r\n\r\n\0\0\0\0' | garbage "$role" "blank lines"
  : | garbage "$role" "nothing"
  # BASP-shaped but wrong: a heartbeat before any handshake, a truncated
  # header, a client handshake whose payload is no node id, and messages
  # for actor ids 1..8 whose payload is random (no handshake either).
  basp_header 06 00 0 0 0 0 | garbage "$role" "a heartbeat"
  basp_header 01 00 0 0 0 0 | head -c 20 | garbage "$role" "half a header"
  { basp_header 01 00 10 0 0 0; head -c 16 /dev/urandom; } \
    | garbage "$role" "a client handshake with a random payload"
  for dst in 1 2 3 4 5 6 7 8; do
    { basp_header 02 00 40 0 1 "$dst"; head -c 64 /dev/urandom; } \
      | garbage "$role" "a random message for actor $dst"
  done
  note "$role port: $sent connections of garbage (random, HTTP, TLS, SSH," \
    "malformed BASP)"
}

# Dies unless the server listens on exactly the ports of `roles...`.
expect_listening() {
  local want="" role got
  want=$(for role in "$@"; do echo "${port[$role]}"; done | sort -n \
    | paste -sd' ')
  got=$(listening_ports)
  [[ $got == "$want" ]] \
    || fail "the server listens on TCP ports '$got', expected '$want'" \
      "($*)"
  note "the server listens on TCP ports $got ($*) and no other"
}

# Shows the warnings and errors the server logged from line `from` on; an
# error is a finding.
check_log() {
  local from=$1 problems
  problems=$(log_problems "$from")
  note "${server_log##*/} from line $from: $(($(log_lines) - from + 1))" \
    "lines, $(grep -c . <<<"$problems" || true) warnings/errors"
  if [[ -n $problems ]]; then
    printf '%s\n' "$problems" | cut -d' ' -f2- | sort | uniq -c | sort -rn \
      | head -n 10
  fi
  ! grep -qE '\[(error|critical)\]' <<<"$problems" \
    || finding "the server logged errors (${server_log##*/})"
}

# SIGTERM must stop the server with exit 0 within 30 s.
stop_server_timed() {
  local stop_at
  stop_at=$(now_ms)
  stop_server "$server_pid"
  server_pid=""
  note "the server exited 0 $(($(now_ms) - stop_at)) ms after SIGTERM"
}

# -- 0. start and warm up -----------------------------------------------------

step "0: a server on three role ports, $((10 * warm_chats_n)) warm-up calls"
# --port=0 as well: with role ports it must not be published even if asked.
start_server "$tmp/server" --postgres="$dsn" --port=0 --gateway-port=0 \
  --worker-port=0 --admin-port=0
read_ports
((port[api] == 0)) \
  || fail "the all-roles API is published on port ${port[api]} next to the" \
    "role ports (port file line 1 must be 0)"
for role in "${roles[@]}"; do
  [[ ${port[$role]:-} =~ ^[1-9][0-9]*$ ]] \
    || fail "no $role port in the port file: $(cat "$tmp/server.port")"
done
note "server pid $server_pid; ports gateway=${port[gateway]}" \
  "worker=${port[worker]} admin=${port[admin]}; port file line 1: 0"
expect_listening "${roles[@]}"

# Ten operations per chat, over every role: ordinary traffic.
warm_chats=()
ops=0
for ((n = 0; n < warm_chats_n; n++)); do
  chat=$(random_chat)
  warm_chats+=("$chat")
  cli_expect 0 admin create-chat --chat="$chat" --daily-images=1 --balance=3
  cli_expect 0 gateway touch --chat="$chat"
  cli_expect 0 gateway reserve --chat="$chat" --kind=image
  id=$(jq .id <<<"$out")
  cli_expect 0 worker start --chat="$chat" --reservation="$id"
  cli_expect 0 worker heartbeat --chat="$chat" --reservation="$id"
  cli_expect 0 worker commit --chat="$chat" --reservation="$id"
  cli_expect 0 gateway reserve --chat="$chat" --kind=image --request-id=w
  cli_expect 0 gateway cancel --chat="$chat"
  cli_expect 0 admin top-up --chat="$chat" --credits=2 \
    --payment-id="hostile-$chat"
  cli_expect 0 gateway status --chat="$chat"
  expect_out "warm-up chat $chat" '.daily_images == 0 and .balance == 5
    and .reservation == null'
  ((ops += 10))
done
require_alive "the warm-up"
sleep 1 # let the last replies' buffers go
base_rss=$(memory_kib)
base_fds=$(server_fds)
base_log=$(($(log_lines) + 1))
note "$ops operations on ${#warm_chats[@]} chats"
note "baseline: VmRSS $(mib "$base_rss") ($base_rss KiB), $base_fds fds"

# -- 1. garbage bytes ---------------------------------------------------------

step "1: garbage bytes on every role port"
for role in "${roles[@]}"; do
  garbage_attack "$role"
done
sleep 0.5
canary "garbage bytes"

# -- 2. the wrong interface ---------------------------------------------------

step "2: CAF clients asking a port for another role's interface"
chat_t=$(random_chat)
cli_expect 0 admin create-chat --chat="$chat_t" --balance=5
cli_expect 0 gateway reserve --chat="$chat_t" --kind=image --request-id=t
rid_t=$(jq .id <<<"$out")
stranger=$(random_chat)
note "chat $chat_t holds reservation $rid_t (queued); chat $stranger unknown"
# command, wrong role, flags
wrong=(
  "top-up worker --chat=$chat_t --credits=7 --payment-id=hostile-x-$chat_t"
  "top-up gateway --chat=$chat_t --credits=7 --payment-id=hostile-y-$chat_t"
  "set-flags gateway --chat=$chat_t --banned=true"
  "set-premium worker --chat=$chat_t --until=2099-01-01T00:00:00Z"
  "create-chat worker --chat=$stranger --balance=9"
  "commit gateway --chat=$chat_t --reservation=$rid_t"
  "commit admin --chat=$chat_t --reservation=$rid_t"
  "start admin --chat=$chat_t --reservation=$rid_t"
  "fail gateway --chat=$chat_t --reservation=$rid_t"
  "reserve worker --chat=$stranger --kind=image"
  "cancel worker --chat=$chat_t"
  "status admin --chat=$chat_t"
  "watch worker"
)
for line in "${wrong[@]}"; do
  read -r cmd role flags <<<"$line"
  read -r -a flag_args <<<"$flags"
  cli_run "$role" "$cmd" "${flag_args[@]}"
  if ((rc != 2)); then
    finding "'$cmd' on the $role port exited $rc, expected 2: $out"
  elif ! out_is '.error == "connection"
      and (.message | test("unexpected_actor_messaging_interface"))'; then
    finding "'$cmd' on the $role port: not a connection error naming" \
      "unexpected_actor_messaging_interface: $out"
  fi
done
note "${#wrong[@]} commands refused by the interface check (exit 2)"
cli_expect 0 gateway status --chat="$chat_t"
out_is ".balance == 5 and .banned == false and .plan == \"free\"
    and .reservation.id == $rid_t
    and .reservation.status == \"queued\"" \
  || finding "chat $chat_t changed by commands sent to the wrong port: $out"
cli_expect 1 gateway status --chat="$stranger"
out_is '.error == "not_found"' \
  || finding "create-chat on the worker port created chat $stranger: $out"
# The reservation is still the one reserved, and the payment ids are unused.
cli_expect 0 gateway cancel --chat="$chat_t"
expect_out "cancel chat $chat_t" ".id == $rid_t"
cli_expect 0 admin top-up --chat="$chat_t" --credits=1 \
  --payment-id="hostile-x-$chat_t"
expect_out "payment id of the refused top-up" '.credits == 1'
note "chat $chat_t unchanged (balance 5, reservation $rid_t queued)," \
  "chat $stranger not created"
canary "wrong interfaces"

# -- 3. out-of-range values ---------------------------------------------------

step "3: out-of-range values through the proper ports"
chat_v=$(random_chat)
chat_w=$(random_chat)
cli_expect 0 admin create-chat --chat="$chat_v" --balance=5
long_id=$(head -c 300 /dev/zero | tr '\0' r)
bad=(
  "gateway reserve --chat=0 --kind=image"
  "gateway reserve --chat=$chat_v --kind=image --request-id=$long_id"
  "gateway status --chat=0"
  "worker commit --chat=$chat_v --reservation=-5"
  "worker start --chat=$chat_v --reservation=0"
  "worker heartbeat --chat=0 --reservation=1"
  "admin top-up --chat=$chat_v --credits=0 --payment-id=hostile-v-$chat_v"
  "admin top-up --chat=$chat_v --credits=99999999999 \
--payment-id=hostile-v-$chat_v"
  "admin top-up --chat=$chat_v --credits=-3 --payment-id=hostile-v-$chat_v"
  "admin top-up --chat=$chat_v --credits=1 --payment-id=$long_id"
  "admin top-up --chat=$chat_v --credits=1 --payment-id=hostile-v-$chat_v \
--priority=1001"
  "admin top-up --chat=$chat_v --credits=1 --payment-id=hostile-v-$chat_v \
--source=gift"
  "admin top-up --chat=$chat_v --credits=1 --payment-id=hostile-v-$chat_v \
--expires-at=2001-01-01T00:00:00Z"
  "admin create-chat --chat=$chat_w --balance=-1"
  "admin create-chat --chat=$chat_w --daily-images=-2"
  "admin create-chat --chat=0 --balance=1"
)
for line in "${bad[@]}"; do
  read -r -a args <<<"$line"
  cli_run "${args[@]}"
  if ((rc != 1)) || ! out_is '.error == "invalid_argument"'; then
    finding "'${args[*]:1:2}...' on the ${args[0]} port exited $rc," \
      "expected 1 and invalid_argument: $out"
  fi
done
note "${#bad[@]} requests refused with invalid_argument (exit 1)"
cli_expect 0 gateway status --chat="$chat_v"
out_is '.balance == 5 and .reservation == null' \
  || finding "chat $chat_v changed by refused requests: $out"
cli_expect 1 gateway status --chat="$chat_w"
out_is '.error == "not_found"' \
  || finding "a refused create-chat created chat $chat_w: $out"
# The refused top-ups did not consume their payment id.
cli_expect 0 admin top-up --chat="$chat_v" --credits=1 \
  --payment-id="hostile-v-$chat_v"
expect_out "top-up with the refused payment id" '.credits == 1'
cli_expect 0 gateway status --chat="$chat_v"
expect_out "chat $chat_v after one top-up" '.balance == 6'
# A promo grant that expires in 30 days ('d': days, the CLI's form).
cli_expect 0 admin top-up --chat="$chat_v" --credits=2 \
  --payment-id="hostile-g-$chat_v" --expires-in=30d --priority=5 --source=promo
expect_out "a promo grant's top-up" '.source == "promo" and .priority == 5
  and .expires_in_ms == 2592000000 and (.expires_at | type) == "string"
  and .grant_id > 0'
cli_expect 2 admin top-up --chat="$chat_v" --credits=2 \
  --payment-id="hostile-g2-$chat_v" --expires-in=30d \
  --expires-at=2999-01-01T00:00:00Z
expect_out "--expires-in with --expires-at" '.error == "usage"'
note "chat $chat_v unchanged, chat $chat_w not created, payment id unused"
canary "out-of-range values"

# -- 4. clients that never speak ----------------------------------------------

step "4: 25 silent connections per port during the canary"
idle_per_port=20
partial_per_port=5
(
  for role in "${roles[@]}"; do
    for ((n = 0; n < idle_per_port; n++)); do
      exec {fd}<>"/dev/tcp/127.0.0.1/${port[$role]}"
    done
    # Slow loris: the first 16 bytes of a header, the rest never comes.
    for ((n = 0; n < partial_per_port; n++)); do
      exec {fd}<>"/dev/tcp/127.0.0.1/${port[$role]}"
      basp_header 01 00 0 0 0 0 | head -c 16 >&"$fd"
    done
  done
  : >"$tmp/idle.ready"
  exec sleep 300
) 2>"$tmp/idle.err" &
idle_pid=$!
on_exit_kill "$idle_pid"
poll 60 test -e "$tmp/idle.ready" \
  || fail "could not open the silent connections: $(cat "$tmp/idle.err")"
held=$((${#roles[@]} * (idle_per_port + partial_per_port)))
poll 60 fds_at_least $((base_fds + held)) \
  || fail "the server holds $(server_fds) fds, expected at least" \
    "$((base_fds + held)) with $held silent connections"
note "$held connections held open, the server has $(server_fds) fds" \
  "(after $poll_seconds s)"
canary "$held silent connections"
stop_process "$idle_pid"
idle_pid=""
poll 60 fds_at_most $((base_fds + 4)) \
  || finding "the server still has $(server_fds) fds 60 s after the silent" \
    "connections closed (baseline $base_fds)"
note "closed; the server has $(server_fds) fds after $poll_seconds s"

# -- 5. clients killed in flight ----------------------------------------------

step "5: CLI clients killed with requests in flight"
kill_chats=()
for ((n = 0; n < 5; n++)); do
  chat=$(random_chat)
  kill_chats+=("$chat")
  cli_expect 0 admin create-chat --chat="$chat" --balance=10
done
# Kill at once, and a little later, so that some die before connecting,
# some during the handshake and some with the request sent.
killed=0
for delay in 0 0.005 0.01 0.02 0.04; do
  victims=()
  for ((n = 0; n < 10; n++)); do
    chat=${kill_chats[n % 5]}
    if ((n % 2 == 0)); then
      "$cli_bin" --server="127.0.0.1:${port[gateway]}" reserve \
        --chat="$chat" --kind=image --request-id="killed-$delay-$n" \
        >/dev/null 2>&1 &
    else
      "$cli_bin" --server="127.0.0.1:${port[gateway]}" status \
        --chat="$chat" >/dev/null 2>&1 &
    fi
    victims+=($!)
  done
  sleep "$delay"
  # Reaped in the same block: bash reports each "Killed" job on stderr.
  {
    kill -KILL "${victims[@]}" 2>/dev/null || true
    for pid in "${victims[@]}"; do
      reap "$pid"
      ((status != 137)) || ((++killed))
    done
  } 2>/dev/null
  victims=()
done
note "$killed of 50 clients killed before they finished"
# Once the server closed their connections, it has handed on all it read
# from them: a reserve a killed client got out is ahead of every request
# below in the actors' mailboxes.
poll 60 no_connections_on gateway \
  || fail "the server still holds connections of killed clients after 60 s"
note "the server closed the killed clients' connections after $poll_seconds s"
canary "killed clients"
# Every chat still answers at once; a reservation of a killed client is
# allowed (it was reserved), and the chat is free again once cancelled.
held_by_killed=0
for chat in "${kill_chats[@]}"; do
  cli_expect 0 gateway status --chat="$chat"
  if ! out_is '.reservation == null'; then
    out_is '.reservation.status == "queued"
      and (.reservation.request_id | startswith("killed-"))' \
      || finding "chat $chat holds an unexpected reservation: $out"
    ((++held_by_killed))
    cli_expect 0 gateway cancel --chat="$chat"
  fi
  cli_expect 0 gateway reserve --chat="$chat" --kind=image \
    --request-id=after-kill
  cli_expect 0 gateway cancel --chat="$chat"
  cli_expect 0 gateway status --chat="$chat"
  out_is '.balance == 10 and .reservation == null' \
    || finding "chat $chat after cancelling: $out"
done
note "$held_by_killed of 5 chats held a reservation of a killed client;" \
  "all reserve and cancel again, balances 10"

# -- 6. connection churn ------------------------------------------------------

step "6: 1,000 connections opened and closed, then $status_calls status calls"
started=$(now_ms)
for ((n = 0; n < 1000; n++)); do
  if ! { exec {fd}<>"/dev/tcp/127.0.0.1/${port[gateway]}"; } 2>/dev/null; then
    require_alive "$n connections"
    fail "connection $n to the gateway port refused"
  fi
  exec {fd}>&-
done
note "1,000 connections in $(($(now_ms) - started)) ms"
require_alive "1,000 connections"
started=$(now_ms)
chat=${warm_chats[0]}
for ((n = 0; n < status_calls; n++)); do
  cli_run gateway status --chat="$chat"
  if ((rc != 0)) || ! out_is '.balance == 5'; then
    fail "status call $n after the churn exited $rc: $out" \
      "$(cat "$tmp/cli.err")"
  fi
done
note "$status_calls status calls in $(($(now_ms) - started)) ms"
poll 60 fds_at_most $((base_fds + 4)) \
  || finding "the server still has $(server_fds) fds 60 s after the churn" \
    "(baseline $base_fds)"
note "the server has $(server_fds) fds (baseline $base_fds)" \
  "after $poll_seconds s"
canary "1,000 connections and $status_calls status calls"

# -- 7. headers announcing a huge payload -------------------------------------

step "7: BASP headers announcing a $((huge_payload_bytes >> 20)) MiB payload"
# 32 bytes: a client handshake that claims a payload of huge_payload_bytes;
# nothing else is sent and the connection stays open. CAF 0.17.6's BASP
# broker accepts any payload length up to 4 GiB in a header and resizes
# (zero-fills) the connection's read buffer to it at once, on the I/O
# thread, before any handshake. That is a known limit of CAF we cannot patch
# here (README.md, "Known limits of CAF 0.17"), so the growth is only
# reported. What must hold: the server survives, another client is served
# meanwhile, the memory is given back once the attacker hangs up (VmRSS
# within the baseline slack), and the canary works afterwards.
limit=$((base_rss + rss_slack_kib))
for role in "${roles[@]}"; do
  if ! { exec {fd}<>"/dev/tcp/127.0.0.1/${port[$role]}"; } 2>/dev/null; then
    require_alive "the huge payload headers"
    fail "cannot connect to the $role port"
  fi
  before=$(memory_kib)
  sent_at=$(now_ms)
  basp_header 01 00 "$(printf '%x' "$huge_payload_bytes")" 0 0 0 >&"$fd"
  # Another client at the same moment (for the gateway attack, on another
  # connection to the same port).
  cli_run gateway status --chat="${warm_chats[1]}"
  latency=$(($(now_ms) - sent_at))
  ((rc == 0)) || finding "a status call on the gateway port while a" \
    "header on the $role port announced a huge payload exited $rc: $out"
  # Sample until the resident set stops growing (at most 5 s).
  held_rss=$(memory_kib) last=0
  for ((n = 0; n < 25 && held_rss != last; n++)); do
    sleep 0.2
    last=$held_rss
    held_rss=$(memory_kib)
  done
  hwm=$(memory_kib VmHWM)
  require_alive "a header on the $role port announced a huge payload"
  note "$role port, connection held: VmRSS $(mib "$before") ->" \
    "$(mib "$held_rss") (+$(mib $((held_rss - before)))), VmHWM" \
    "$(mib "$hwm"); a status call on the gateway port took ${latency} ms"
  closed_at=$(now_ms)
  exec {fd}>&-
  if poll 30 rss_at_most "$limit"; then
    note "$role port, connection closed: VmRSS $(mib "$(memory_kib)")" \
      "after $(($(now_ms) - closed_at)) ms (limit $(mib "$limit"))"
  else
    finding "VmRSS $(mib "$(memory_kib)") 30 s after the connection that" \
      "announced $((huge_payload_bytes >> 20)) MiB on the $role port" \
      "closed, more than the baseline $(mib "$base_rss") +" \
      "$(mib "$rss_slack_kib")"
  fi
  canary "a huge payload header on the $role port"
done

# -- 8. memory, log and shutdown ----------------------------------------------

step "8: memory back near the baseline, the log, SIGTERM"
require_alive "all attacks"
# What the server gives back it gives back within a second or so; the
# bounds only say when to stop waiting.
poll 30 rss_at_most "$limit" \
  || finding "VmRSS $(mib "$(memory_kib)") 30 s after the attacks, more" \
    "than the baseline $(mib "$base_rss") + $(mib "$rss_slack_kib")"
poll 60 fds_at_most $((base_fds + 4)) \
  || finding "$(server_fds) fds 60 s after the attacks, baseline $base_fds"
final_rss=$(memory_kib)
peak_rss=$(memory_kib VmHWM)
final_fds=$(server_fds)
note "VmRSS baseline $(mib "$base_rss"), now $(mib "$final_rss")" \
  "(limit $(mib "$limit")), peak (VmHWM) $(mib "$peak_rss")"
note "fds baseline $base_fds, now $final_fds"
check_log "$base_log"
stop_server_timed

# -- 9. the plain all-roles port ----------------------------------------------

step "9: a second server with only --port=0: garbage bytes, canary, SIGTERM"
start_server "$tmp/plain" --postgres="$dsn" --port=0
read_ports
((port[api] > 0)) \
  || fail "port file line 1 is ${port[api]}, expected the all-roles port"
for role in "${roles[@]}"; do
  [[ -z ${port[$role]:-} ]] \
    || fail "a $role port (${port[$role]}) was published without being asked"
done
note "server pid $server_pid; all-roles port ${port[api]}, no role ports"
expect_listening api
garbage_attack api
sleep 0.5
canary "garbage bytes" api
check_log 1
stop_server_timed
end_step

((${#findings[@]} == 0)) || exit 1
printf '\nhostile: all steps passed in %d ms\n' $(($(now_ms) - test_started))
