#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# chargeonce-http-floor serves the bench's HTTP cycle from a child process
# and measures it with the bench's own HTTP driver: every run completes
# cycles (a reservation answer without an id, or any failed request, fails
# the tool), reports the serving process's CPU and this one's per cycle,
# and bad arguments are refused.
set -euo pipefail
floor=$1

out=$("$floor" --clients=1,4 --duration=1s --json)
echo "$out"
jq -e '.http_floor | length == 2' <<<"$out" >/dev/null
jq -e '[.http_floor[].clients] == [1, 4]' <<<"$out" >/dev/null
jq -e 'all(.http_floor[]; .cycles_per_s > 0 and .cycle_p50_us > 0
           and .server_cpu_us_per_cycle > 0 and .bench_cpu_us_per_cycle > 0)' \
  <<<"$out" >/dev/null

for bad in --clients=0 --clients=1,x --duration=0s --frobnicate; do
  if "$floor" "$bad" >/dev/null 2>&1; then
    echo "chargeonce-http-floor accepted $bad" >&2
    exit 1
  fi
done
echo "http_floor: ok"
