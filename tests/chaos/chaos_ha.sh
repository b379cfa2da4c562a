#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# chargeonce-chaos --postgres-ha in CI: two servers on a pg_auto_failover
# formation (scripts/ha-cluster: a primary and its synchronous standby),
# the primary's Postgres killed (-9), or its whole node (pg_autoctl too),
# again and again while gateways and workers run; then the audit, against
# the promoted primary: every invariant holds (each acknowledged commit
# charged once, conservation, the ledger's chain, no lock left past its
# deadline and the time without a primary), and at least one failover of
# each kind happened. Then the usage errors of the option. The seed is
# random unless CHARGEONCE_CHAOS_SEED is set.
#
# CHARGEONCE_CHAOS_HA_SELF_TEST=1 adds the self-test of the loss
# (--self-test-lost-commit) on the same formation: servers that commit with
# synchronous_commit = local and a failover whose replication was stalled
# for 3 s must be caught losing acknowledged commits. Not in CI: it adds
# about 30 s (a restart of the formation, one failover and the old
# primary's rejoin, the drain), CI's budget for this test is 15.
#
# usage: chaos_ha.sh CHARGEONCE-CHAOS CHARGEONCE-SERVER HA-CLUSTER
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 3)) || die "usage: chaos_ha.sh CHARGEONCE-CHAOS CHARGEONCE-SERVER HA-CLUSTER"
chaos=$(realpath "$1")
server=$(realpath "$2")
ha=$(realpath "$3")
[[ -x $chaos && -x $server && -x $ha ]] || die "not executables: $chaos $server $ha"
for tool in jq pg_autoctl; do
  command -v "$tool" >/dev/null || die "$tool is required (scripts/install-deps)"
done

seed=${CHARGEONCE_CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
duration=${CHARGEONCE_CHAOS_HA_DURATION:-40}
tmp=$(mktemp -d "$PWD/chaos_ha.XXXXXX")
chmod 755 "$tmp" # the formation runs as postgres when we are root
data=$tmp/data
on_exit_remove "$tmp"
stop_formation() { HA_DIR=$data/ha "$ha" stop >/dev/null 2>&1 || true; }
on_exit_run stop_formation
on_exit_show_log "$data/server-*.log" "$data/ha.log"

check() {
  jq -e "$2" "$3" >/dev/null || {
    jq '{result, harness_error, faults: .faults.by_type, invariants,
      violations: .violations[:10]}' "$3" >&2
    die "$1 ($2)"
  }
}

echo "== chaos on a formation: seed=$seed duration=${duration}s, failovers" \
  "of Postgres and of whole nodes"
status=0
"$chaos" --seed="$seed" --duration="$duration" --servers=2 --postgres-ha \
  --ha-cluster="$ha" --faults=failover,failover-node --data-dir="$data" \
  --server="$server" --json="$tmp/run.json" || status=$?
[[ -f $tmp/run.json ]] || die "no JSON summary (exit $status)"
((status == 0)) || {
  jq '{result, harness_error, violations: .violations[:20]}' "$tmp/run.json"
  die "chargeonce-chaos --postgres-ha --seed=$seed exited $status"
}
check "the run is clean" '.result == "ok" and .violations_total == 0' \
  "$tmp/run.json"
# Every fault type comes once before any repeats: both kinds fit in 40 s.
check "a failover of each kind" '.faults.by_type.failover >= 1
  and .faults.by_type["failover-node"] >= 1' "$tmp/run.json"
check "time without a primary measured" '.faults.no_primary_ms > 0' \
  "$tmp/run.json"
check "it did real work" '.operations.by_op.commit.ok > 20
  and .operations.by_op.top_up.ok > 20' "$tmp/run.json"
check "the failovers were felt" '[.operations.by_op[] |
  (.storage_unavailable // 0) + (.transport_error // 0)] | add > 0' \
  "$tmp/run.json"
check "the money invariants were checked" '
  .invariants["1_charged_exactly_once"].checked > 0
  and .invariants["2_conservation"].checked > 0
  and .invariants["4_no_lock_left"].checked > 0
  and .invariants["13_ledger_chain"].checked > 0' "$tmp/run.json"
jq -c '{operations: .operations.total, faults: .faults.by_type,
  checked: (.invariants | map_values(.checked))}' "$tmp/run.json"

if [[ ${CHARGEONCE_CHAOS_HA_SELF_TEST:-0} == 1 ]]; then
  echo "== self-test: synchronous_commit = local, replication stalled before" \
    "a failover: acknowledged commits must be seen lost"
  status=0
  # The same seed and data dir: the formation above, started again.
  "$chaos" --seed="$seed" --duration=5 --servers=2 --postgres-ha \
    --ha-cluster="$ha" --self-test-lost-commit --faults=failover \
    --data-dir="$data" --server="$server" --json="$tmp/lost.json" \
    >"$tmp/lost.txt" || status=$?
  ((status == 1)) || {
    jq '{result, harness_error}' "$tmp/lost.json" >&2 || true
    die "the run that loses commits exited $status, expected 1"
  }
  check "a stalled failover happened and lost acknowledged commits" '
    .result == "violations" and .faults.by_type.failover >= 1
    and (.faults.log[0].detail | test("stalled_ms="))
    and .invariants["1_charged_exactly_once"].violations >= 1' \
    "$tmp/lost.json"
  grep -q "acknowledged commit has no ledger row" "$tmp/lost.txt" \
    || die "the text summary does not list a lost commit"
  jq -c '{lost: (.invariants | map_values(.violations)
    | with_entries(select(.value > 0))), failover: .faults.log[0].detail}' \
    "$tmp/lost.json"
fi

echo "== usage errors exit 2"
for args in "--faults=failover" "--faults=failover-node" \
  "--postgres-ha --postgres=dbname=x" "--postgres-ha --faults=restart-postgres" \
  "--self-test-lost-commit"; do
  status=0
  # shellcheck disable=SC2086 # the words are separate options
  "$chaos" $args >/dev/null 2>&1 || status=$?
  ((status == 2)) || die "chargeonce-chaos $args exited $status, expected 2"
done

echo "chaos_ha: OK (seed $seed)"
