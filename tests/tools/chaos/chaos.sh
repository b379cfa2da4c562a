#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# chargeonce-chaos in CI: every fault type once (in a seeded order, however
# long that takes: about 25 s) against two real servers on a private
# embedded Postgres (restart and SIGSTOP need a cluster of our own, so
# CHARGEONCE_TEST_DSN is not used), then checks the exit code and the JSON
# summary; then one short run with every forgery of the default catalog,
# each of which the auditor must report (so a blind auditor fails this
# test); then every fault once more with a catalog generated from the seed,
# and a short run with a credit moved between pockets that only
# conservation per pocket can see; and usage errors. The seed is random
# unless CHARGEONCE_CHAOS_SEED is set, and is printed: rerun with it to
# replay the same workload and fault schedule.
#
# Nothing here is left to the odds of a run's length: the tool injects
# every enabled fault at least once, sends a request while Postgres is down
# in each outage, plants one job of every answer checked below that chance
# might not give (busy, a cancel while queued, a cancel that asks a started
# job's worker to stop, a job of unknown outcome resolved both ways) and of
# every sort the forgeries need, touches that chat once its window is due
# for a refill, and goes on past --duration until --min-acknowledged holds.
# CHARGEONCE_CHAOS_DURATION and CHARGEONCE_CHAOS_GENERATED_DURATION (the
# least seconds of chaos, default 1) make longer runs.
#
# usage: chaos.sh CHARGEONCE-CHAOS CHARGEONCE-SERVER
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../support/lib.sh"

(($# == 2)) || die "usage: chaos.sh CHARGEONCE-CHAOS CHARGEONCE-SERVER"
chaos=$(realpath "$1")
server=$(realpath "$2")
[[ -x $chaos && -x $server ]] || die "not executables: $chaos $server"
command -v jq >/dev/null || die "jq is required (apt-get install jq)"

seed=${CHARGEONCE_CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
duration=${CHARGEONCE_CHAOS_DURATION:-1}
gen_duration=${CHARGEONCE_CHAOS_GENERATED_DURATION:-1}
tmp=$(mktemp -d "$PWD/chaos.XXXXXX")
chmod 755 "$tmp" # the cluster runs as postgres when we are root
data=$tmp/data

on_exit_remove "$tmp"
# A chaos run killed while Postgres was paused leaves it stopped: the trap
# thaws the postmaster and its children, then shuts it down.
on_exit_stop_postgres "$data/postgres/data"
on_exit_show_log "$data/server-*.log"

# check DESCRIPTION JQ-EXPRESSION FILE: the expression must yield true.
check() {
  jq -e "$2" "$3" >/dev/null || {
    jq '{result, harness_error, faults: .faults.by_type, invariants,
      violations: .violations[:10]}' "$3" >&2
    die "$1 ($2)"
  }
}

# Prints how long the step took.
took() { echo "($1 took $((SECONDS - step_started)) s)"; }

echo "== chaos run: seed=$seed duration=${duration}s at least, all faults"
step_started=$SECONDS
status=0
"$chaos" --seed="$seed" --duration="$duration" --servers=2 \
  --min-acknowledged=commit:51 \
  --data-dir="$data" --server="$server" --json="$tmp/run.json" || status=$?
took "the chaos run"
[[ -f $tmp/run.json ]] || die "no JSON summary (exit $status)"
((status == 0)) || {
  jq '{result, harness_error, violations: .violations[:20]}' "$tmp/run.json"
  die "chargeonce-chaos --seed=$seed exited $status"
}
check "the run is clean" '.result == "ok" and .violations_total == 0' \
  "$tmp/run.json"
check "it did real work" '.operations.by_op.commit.ok > 50
  and .operations.by_op.reserve.busy > 0' "$tmp/run.json"
check "cancels of started jobs asked their workers to stop, and they learnt it" \
  '.operations.cancel_requested.cancels > 0
  and .operations.cancel_requested.heartbeats > 0' "$tmp/run.json"
check "provider timeouts went uncertain and were resolved both ways" \
  '.operations.by_op.uncertain.ok > 0 and .operations.by_op.resolve.ok > 0
  and (.operations.by_op.resolve.invalid_state // 0) > 0' "$tmp/run.json"
for fault in kill-server terminate-backend restart-postgres pause-postgres \
  drop-connection kill-worker; do
  check "fault $fault was injected" ".faults.by_type[\"$fault\"] >= 1" \
    "$tmp/run.json"
done
check "the faults were felt" '[.operations.by_op[] |
  (.storage_unavailable // 0) + (.transport_error // 0)] | add > 0' \
  "$tmp/run.json"
check "each outage was probed" '[.faults.log[]
  | select(.fault == "restart-postgres" or .fault == "pause-postgres")
  | .detail | test("probe=")] | all' "$tmp/run.json"
check "every invariant was checked" \
  '[.invariants[] | .checked > 0] | all' "$tmp/run.json"
check "windows were refilled during the run, each in the ledger" \
  '.ledger.refill > 0 and .ledger.admin > 0 and .ledger.charge > 0' \
  "$tmp/run.json"
check "grants with expiries were given, and some voided" \
  '.grants.with_expiry > 0 and (.operations.by_op.void_grant.ok // 0) > 0' \
  "$tmp/run.json"
jq -c '{operations: .operations.total, faults: .faults.by_type,
  locks, grants, checked: (.invariants | map_values(.checked))}' \
  "$tmp/run.json"

# Every forgery of the default catalog shares one short run; each must be
# reported by its invariant, told apart by what the auditor says where two
# share one (chaos.audit checks each mutant alone, and that no other
# invariant sees it). A forgery needs a job of its sort, which a short run
# on a slow machine often lacks, so the harness plants one of each before
# the workload starts (a cancel while queued, a commit of 1 of 3 units and
# a whole one after it, a job left uncertain) on a chat of its own that
# holds 1,000 jobs' worth, and, while the workload runs, a job on that chat
# reserved just before its window is due and committed just after a touch
# refilled it (a charge a past window paid). The run lasts 1 s, without
# faults (no fault would come within it), so that the forgeries depend on
# those: without the planting most seeds end with a harness error,
# "nothing to forge", and this test fails.
echo "== self-test: every forgery must be caught by its invariant"
step_started=$SECONDS
forged_seed=$seed
status=0
"$chaos" --seed="$forged_seed" --duration=1 --servers=1 \
  --faults= --self-test-violation \
  --self-test-lost-event --self-test-cancel-charged \
  --self-test-uncertain-charged --self-test-uncertain-left \
  --self-test-over-capture --self-test-ledger-chain \
  --self-test-second-start --self-test-window-paid-twice \
  --self-test-grant-left --self-test-sole-grant \
  --self-test-grant-conserved --self-test-hold-expired \
  --self-test-grant-order --self-test-void-twice \
  --data-dir="$data" --server="$server" --json="$tmp/forged.json" \
  >"$tmp/forged.txt" || status=$?
took "the forged run"
((status == 1)) || {
  jq '{result, harness_error}' "$tmp/forged.json" >&2 || true
  die "the forged run (seed $forged_seed) exited $status, expected 1"
}
check "the forged run got to its audit" '.result == "violations"' \
  "$tmp/forged.json"
# The first cancelled and the first uncertain job of the record are the
# planted ones, so their forgeries must name the planted chat.
check "the forgeries used the planted jobs" '.planted_chat as $p
  | $p != null and ([.violations[] | select(.chat == $p) | .invariant]
    | index("10_cancelled_never_charged") != null
      and index("11_uncertain_charged_by_resolve") != null)' \
  "$tmp/forged.json"
# seen INVARIANT [TEXT]: a violation of INVARIANT whose text contains TEXT.
seen() {
  printf '.result == "violations" and any(.violations[];
    .invariant == "%s" and (.what | contains("%s")))' "$1" "${2:-}"
}
check "the forged charge is reported" \
  "$(seen 1_charged_exactly_once "without any commit request")" "$tmp/forged.json"
check "the forged charge breaks conservation" "$(seen 2_conservation)" \
  "$tmp/forged.json"
check "the charged cancelled job is reported" \
  "$(seen 10_cancelled_never_charged)" "$tmp/forged.json"
check "the charge of an uncertain job is reported" \
  "$(seen 11_uncertain_charged_by_resolve)" "$tmp/forged.json"
check "the job left uncertain is reported" \
  "$(seen 12_nothing_left_uncertain)" "$tmp/forged.json"
check "the commit of fewer units that charged its whole hold is reported" \
  "$(seen 1_charged_exactly_once "but the reservation held")" "$tmp/forged.json"
check "the ledger row that does not start where the one before ended" \
  "$(seen 13_ledger_chain "starts at")" "$tmp/forged.json"
check "the grant charged behind the balance is reported" \
  "$(seen 18_balance_is_its_grants "its grants have")" "$tmp/forged.json"
check "the sole grant that is not the chat's is reported" \
  "$(seen 19_sole_grant_alone "contradict its sole grant")" "$tmp/forged.json"
check "the grant given a credit no ledger row gave is reported" \
  "$(seen 20_grant_conserved "its top-up gave")" "$tmp/forged.json"
check "the hold on a grant that had expired is reported" \
  "$(seen 21_nothing_held_expired "which expired")" "$tmp/forged.json"
check "the hold that passed over a grant is reported" \
  "$(seen 22_spending_order "earlier in spending order")" "$tmp/forged.json"
check "the grant voided twice is reported" \
  "$(seen 23_expiry_and_void_once "voided 2 times")" "$tmp/forged.json"
# Without faults the planted grants run their course: a promo that expired
# while a job held it, a grant voided before the hold.
check "a grant expired while held, one was voided" \
  '.grants.expired_while_held > 0 and .grants.voided > 0' "$tmp/forged.json"
check "the lost event is reported" "$(seen 14_event_with_each_change)" \
  "$tmp/forged.json"
check "the job started by a second worker is reported" \
  "$(seen 16_one_worker_per_job "acknowledged to two workers")" \
  "$tmp/forged.json"
check "the past window's charge that took from the new window too is reported" \
  "$(seen 17_paid_by_its_window "two windows paid")" "$tmp/forged.json"
grep -q "without any commit request" "$tmp/forged.txt" ||
  die "the text summary does not list the forged charge"

echo "== a generated catalog: every fault, ${gen_duration}s at least," \
  "conservation per pocket"
# A cluster of its own: the kinds the first run's ledger names are not in
# the generated catalog, and a server refuses to drop them.
gen_data=$tmp/data-generated
on_exit_stop_postgres "$gen_data/postgres/data"
on_exit_show_log "$gen_data/server-*.log"
step_started=$SECONDS
status=0
"$chaos" --seed="$seed" --duration="$gen_duration" --servers=2 \
  --min-acknowledged=commit:21 \
  --catalog=generated --data-dir="$gen_data" --server="$server" \
  --json="$tmp/generated.json" || status=$?
took "the generated run"
[[ -f $tmp/generated.json ]] || die "no JSON summary of the generated run (exit $status)"
((status == 0)) || {
  jq '{result, harness_error, violations: .violations[:20]}' "$tmp/generated.json"
  die "chargeonce-chaos --seed=$seed --catalog=generated exited $status"
}
check "the generated run is clean" '.result == "ok" and .violations_total == 0
  and .catalog == "generated"' "$tmp/generated.json"
check "it did real work" '.operations.by_op.commit.ok > 20' "$tmp/generated.json"
# A generated catalog may have no kind that pays from the balance: then no
# hold is ever taken from a grant, and the checks of holds on grants (21,
# 22) have nothing to judge.
if jq -e '[.kinds[].pay_from[].pocket] | index("balance") != null' \
  "$gen_data/catalog.json" >/dev/null; then
  check "every invariant was checked" \
    '[.invariants[] | .checked > 0] | all' "$tmp/generated.json"
else
  echo "no kind pays from the balance: 21 and 22 judge no hold"
  check "every other invariant was checked" '[.invariants | to_entries[]
    | select(.key | test("^2[12]_") | not) | .value.checked > 0] | all' \
    "$tmp/generated.json"
fi
kinds=$(jq -r '.kinds | keys | join(",")' "$gen_data/catalog.json")
[[ $kinds == kind_* ]] || die "the servers' catalog is not the generated one: $kinds"
echo "kinds sold: $kinds"

echo "== self-test: a credit moved into a daily pocket must be caught"
# The move takes a unit of balance from the first chat that has one: the
# worker processes' chats start with 1,000 jobs' worth, so there is one.
step_started=$SECONDS
status=0
"$chaos" --seed="$seed" --duration=1 --servers=1 --catalog=generated \
  --faults=drop-connection --self-test-pocket-move \
  --data-dir="$gen_data" --server="$server" --json="$tmp/moved.json" \
  >"$tmp/moved.txt" || status=$?
took "the run with a moved credit"
((status == 1)) || die "the run with a moved credit exited $status, expected 1"
check "only conservation per pocket sees the move" '.result == "violations"
  and .invariants["2_conservation"].violations >= 1
  and .invariants["1_charged_exactly_once"].violations == 0' "$tmp/moved.json"

echo "== usage errors exit 2"
for args in --faults=no-such-fault --min-acknowledged=commits:5 \
  --min-acknowledged=commit; do
  status=0
  "$chaos" "$args" >/dev/null 2>&1 || status=$?
  ((status == 2)) || die "chargeonce-chaos $args exited $status, expected 2"
done

echo "chaos: OK (seed $seed)"
