#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Helpers shared by the end-to-end test scripts under tests/; source it.

# True while `pid` runs (a zombie does not count).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# Waits up to `seconds` (may be fractional: 0.5) for `pid` to end.
wait_gone() {
  local pid=$1 tenths
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

# Polls `command...` every 0.1 s for up to `seconds`; true once it succeeds.
poll() {
  local tenths=$(($1 * 10))
  shift
  for ((i = 0; i < tenths; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  "$@"
}

# A random 12-digit chat id, so reruns and other suites never collide.
random_chat() {
  local n
  n=$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')
  echo $((n % 900000000000 + 100000000000))
}
