#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# chargeonce-chaos --postgres-ha in CI: two servers on a pg_auto_failover
# formation (scripts/ha-cluster: a primary and its synchronous standby),
# the primary's Postgres killed (-9) and its whole node (pg_autoctl too),
# once each in a seeded order, while gateways and workers run; then the
# audit, against the promoted primary: every invariant holds (each
# acknowledged commit charged once, conservation, the ledger's chain, no
# lock left past its deadline and the time without a primary), and a
# failover of each kind happened. Then the usage errors of the option. The
# seed is random unless CHARGEONCE_CHAOS_SEED is set.
#
# Nothing is left to the odds of the run's length: the tool injects every
# enabled fault once however long that takes (about 40 s here), sends
# requests during each failover until one meets it, plants the answers the
# audit needs, and goes on until --min-acknowledged holds; so the run lasts
# as long as that (CHARGEONCE_CHAOS_HA_DURATION, the least seconds of chaos,
# default 1, makes longer ones). The tool's own SQL through the formation
# (migrations, clearing its chats, the audit's reads) and the chats'
# creation are keyed and repeated while the primary moves.
#
# CHARGEONCE_CHAOS_HA_SELF_TEST=1 adds the self-test of the loss
# (--self-test-lost-commit) on the same formation: servers that commit with
# synchronous_commit = local and a failover whose replication was stalled
# for 3 s must be caught losing acknowledged commits; the tool commits a
# job of its own while the walsenders are stopped, so there always is one.
# Not in CI: it adds about 45 s (a restart of the formation, one failover
# and the old primary's rejoin, the drain).
#
# usage: chaos_ha.sh CHARGEONCE-CHAOS CHARGEONCE-SERVER HA-CLUSTER
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../support/lib.sh"

(($# == 3)) || die "usage: chaos_ha.sh CHARGEONCE-CHAOS CHARGEONCE-SERVER HA-CLUSTER"
chaos=$(realpath "$1")
server=$(realpath "$2")
ha=$(realpath "$3")
[[ -x $chaos && -x $server && -x $ha ]] || die "not executables: $chaos $server $ha"
for tool in jq pg_autoctl; do
  command -v "$tool" >/dev/null || die "$tool is required (scripts/install-deps)"
done

seed=${CHARGEONCE_CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
duration=${CHARGEONCE_CHAOS_HA_DURATION:-1}
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

# Prints how long the step took.
took() { echo "($1 took $((SECONDS - step_started)) s)"; }

echo "== chaos on a formation: seed=$seed duration=${duration}s at least," \
  "a failover of Postgres and one of a whole node"
step_started=$SECONDS
status=0
"$chaos" --seed="$seed" --duration="$duration" --servers=2 --postgres-ha \
  --ha-cluster="$ha" --faults=failover,failover-node \
  --min-acknowledged=commit:21,top_up:21 --data-dir="$data" \
  --server="$server" --json="$tmp/run.json" || status=$?
took "the run on the formation"
[[ -f $tmp/run.json ]] || die "no JSON summary (exit $status)"
((status == 0)) || {
  jq '{result, harness_error, violations: .violations[:20]}' "$tmp/run.json"
  die "chargeonce-chaos --postgres-ha --seed=$seed exited $status"
}
check "the run is clean" '.result == "ok" and .violations_total == 0' \
  "$tmp/run.json"
check "a failover of each kind" '.faults.by_type.failover >= 1
  and .faults.by_type["failover-node"] >= 1' "$tmp/run.json"
check "time without a primary measured" '.faults.no_primary_ms > 0' \
  "$tmp/run.json"
check "it did real work" '.operations.by_op.commit.ok > 20
  and .operations.by_op.top_up.ok > 20' "$tmp/run.json"
check "the failovers were felt" '([.operations.by_op[] |
  (.storage_unavailable // 0) + (.transport_error // 0)] | add > 0)
  and ([.faults.log[].detail | test("felt_ms=")] | all)' "$tmp/run.json"
check "the money invariants were checked" '
  .invariants["1_charged_exactly_once"].checked > 0
  and .invariants["2_conservation"].checked > 0
  and .invariants["4_no_lock_left"].checked > 0
  and .invariants["13_ledger_chain"].checked > 0' "$tmp/run.json"
jq -c '{operations: .operations.total, faults: [.faults.log[].detail],
  locks, checked: (.invariants | map_values(.checked))}' "$tmp/run.json"

if [[ ${CHARGEONCE_CHAOS_HA_SELF_TEST:-0} == 1 ]]; then
  echo "== self-test: synchronous_commit = local, replication stalled before" \
    "a failover: acknowledged commits must be seen lost"
  step_started=$SECONDS
  status=0
  # The same seed and data dir: the formation above, started again.
  "$chaos" --seed="$seed" --duration=1 --servers=2 --postgres-ha \
    --ha-cluster="$ha" --self-test-lost-commit --faults=failover \
    --data-dir="$data" --server="$server" --json="$tmp/lost.json" \
    >"$tmp/lost.txt" || status=$?
  took "the run that loses commits"
  ((status == 1)) || {
    jq '{result, harness_error}' "$tmp/lost.json" >&2 || true
    die "the run that loses commits exited $status, expected 1"
  }
  check "a stalled failover happened and lost acknowledged commits" '
    .result == "violations" and .faults.by_type.failover >= 1
    and (.faults.log[0].detail | test("stalled_ms=.* lost_commit_ms="))
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
  "--self-test-lost-commit" "--postgres-ha --self-test-pocket-move" \
  "--postgres-ha --self-test-grant-order"; do
  status=0
  # shellcheck disable=SC2086 # the words are separate options
  "$chaos" $args >/dev/null 2>&1 || status=$?
  ((status == 2)) || die "chargeonce-chaos $args exited $status, expected 2"
done

echo "chaos_ha: OK (seed $seed)"
