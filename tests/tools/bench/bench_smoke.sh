#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# chargeonce-bench works: a short remote run (blocking and asynchronous
# client API, and HTTP/JSON on kept-alive connections) with the baseline
# and every mix, the same with two client processes and the reference's
# pgbench scripts beside them, an in-process run in sequential chat order,
# then the persistence layer alone and the sweep of stuck reservations
# beside one DELETE, all against CHARGEONCE_TEST_DSN. Checks the JSON's
# shape, that every run completed cycles, that Postgres holds exactly the
# charges each run was answered (the audit), that the sweep released every
# stuck reservation, that memory is reported and that the comparison with
# the reference adds up; never how fast. What the checks count comes by
# construction, not by the odds of a short run on a slow machine: every run
# goes on until each client has its --min-cycles, and the server never
# sweeps during the test.
# Usage: bench_smoke.sh SERVER BENCH   (needs CHARGEONCE_TEST_DSN, jq and
# pgbench + psql in /usr/lib/postgresql/15/bin, or PGBENCH=path)
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../support/lib.sh"

server_bin=$1
bench=$2

[[ -n ${CHARGEONCE_TEST_DSN:-} ]] || die "CHARGEONCE_TEST_DSN is not set (run scripts/test)"
dsn=$CHARGEONCE_TEST_DSN
pgbench=${PGBENCH:-/usr/lib/postgresql/15/bin/pgbench}

tmp=$(mktemp -d "$PWD/bench_smoke.XXXXXX")
on_exit_remove "$tmp"

# Each run's window stays open past --duration until every client has
# completed this many cycles in it (each persistence run: this many cycles,
# and its backend's CPU count has moved). The bench deals --mix 100 cycles
# at a time, so each client's first 100 hold exactly 10 cancels, 10 fails
# and 10 double taps of a 10 % mix, and 80 commits: every "> 0" below holds
# however few cycles a second brings.
min_cycles=100

# The HTTP/JSON API beside the CAF port, with the two tokens a cycle needs.
# The server's own sweep waits an hour: --sweep below measures the bench's
# sweep of its stuck reservations, which a server sweep at the same moment
# would take from it.
echo "gateway-token-for-the-bench" >"$tmp/gateway.token"
echo "worker-token-for-the-bench" >"$tmp/worker.token"
start_server "$tmp/server" --postgres="$dsn" --port=0 --http-port=0 \
  --http-gateway-token-file="$tmp/gateway.token" \
  --http-worker-token-file="$tmp/worker.token" --sweep-interval=1h
servers="127.0.0.1:$server_port"
http_flags=(--http="127.0.0.1:$(port_of http)"
  --http-gateway-token-file="$tmp/gateway.token"
  --http-worker-token-file="$tmp/worker.token")

# Runs the bench; stdout must be exactly one JSON object.
run_bench() { # output-file args...
  local out=$1
  shift
  "$bench" --postgres="$dsn" "$@" --json >"$out" 2>"$out.log" || {
    cat "$out.log" >&2
    die "chargeonce-bench $* exited with $?"
  }
  jq -e . "$out" >/dev/null || die "not one JSON object: $(head -c 300 "$out")"
}

# The fields every run has, and at least one completed cycle.
check_runs() { # file expected-modes
  local file=$1 modes=$2
  jq -e '.runs | length > 0' "$file" >/dev/null || die "$file: no runs"
  [[ $(jq -r '[.runs[].mode] | join(",")' "$file") == "$modes" ]] ||
    die "$file: modes $(jq -c '[.runs[].mode]' "$file"), expected $modes"
  jq -e 'all(.runs[];
        (.clients | type == "number") and .duration_s > 0
        and .cycles > 0 and .cycles_per_s > 0
        and .outcomes.ok > 0 and (.outcomes | has("busy"))
        and .unexpected == 0
        and (.latency_us as $l
             | all("cycle", "reserve", "start", "commit", "cancel", "fail";
                   . as $op | $l[$op] | has("p50") and has("p99")
                                        and has("p999"))))' \
    "$file" >/dev/null || die "$file: a run lacks fields or cycles: $(cat "$file")"
  jq -e 'all(.runs[]; .latency_us.cycle.p50 > 0 and .latency_us.cycle.p999
        >= .latency_us.cycle.p50)' "$file" >/dev/null ||
    die "$file: cycle percentiles out of order"
  # Charged exactly once: one ledger charge of one unit per commit the
  # clients were answered (the window's commits among them), the same units
  # gone from the balances, no reservation left behind.
  jq -e 'all(.runs[]; .audit as $a | $a.ok
        and $a.acknowledged_commits > 0
        and $a.ledger_charges == $a.acknowledged_commits
        and $a.acknowledged_commits >= .commits
        and $a.charged_units == $a.ledger_charges
        and $a.balance_spent == $a.charged_balance
        and $a.open_reservations == 0)' "$file" >/dev/null ||
    die "$file: Postgres does not hold what the clients were answered: $(jq -c '[.runs[] | {mode, commits, audit}]' "$file")"
}

# The quota: every client completed its $min_cycles cycles, and (a 10 % mix
# dealt 100 cycles at a time) at least a tenth of them were each variant.
check_quota() { # file
  jq -e --argjson n "$min_cycles" 'all(.runs[]; .clients as $c
        | .outcomes_by_op as $o | .cycles >= $c * $n
        and $o.cancel.ok >= $c * $n / 10 and $o.fail.ok >= $c * $n / 10
        and $o.double.busy >= $c * $n / 10
        and $o.commit.ok >= $c * $n * 8 / 10)' "$1" >/dev/null ||
    die "$1: a client lacks its $min_cycles cycles or the mix's share of" \
      "them: $(jq -c '[.runs[] | {mode, clients, cycles, outcomes_by_op}]' "$1")"
}

run_bench "$tmp/remote.json" --servers="$servers" --baseline --clients=2 \
  --chats=1000 --duration=1 --warmup=0 --mix=cancel:10,fail:10,double:10 \
  --min-cycles=$min_cycles --client-api=blocking,async,http \
  --server-pid="$server_pid" "${http_flags[@]}"
check_runs "$tmp/remote.json" "remote,remote_async,http,baseline"
check_quota "$tmp/remote.json"
# Each run knows the CPU it cost per cycle: the clients' (this process)
# and the Postgres cluster's (local: its socket), and each run against the
# server the server's; the baseline has no server. Without --statements no
# run lists statements.
jq -e 'all(.runs[]; .bench_cpu_us_per_cycle > 0
          and .postgres_cpu_us_per_cycle > 0 and (has("statements") | not))
       and all(.runs[] | select(.mode != "baseline");
          .server_cpu_us_per_cycle > 0)
       and all(.runs[] | select(.mode == "baseline");
          has("server_cpu_us_per_cycle") | not)' \
  "$tmp/remote.json" >/dev/null ||
  die "no CPU per cycle: $(jq -c '[.runs[] | {mode, server_cpu_us_per_cycle, bench_cpu_us_per_cycle, postgres_cpu_us_per_cycle}]' "$tmp/remote.json")"
# The mix happened in both: cancels, fails and double taps answered busy.
jq -e 'all(.runs[] | select(.mode != "baseline") | .outcomes_by_op;
          (.cancel.ok > 0) and (.fail.ok > 0) and (.double.busy > 0))' \
  "$tmp/remote.json" >/dev/null || die "the mix did not happen: $(cat "$tmp/remote.json")"
jq -e '[.ratios[] | [.mode, .clients]]
         == [["remote", 2], ["remote_async", 2], ["http", 2]]
       and all(.ratios[]; .cycles_per_s > 0)' \
  "$tmp/remote.json" >/dev/null || die "no ratios: $(jq -c .ratios "$tmp/remote.json")"

# Two client processes: their figures come back merged; the server's
# memory is reported after the run. The reference's two pgbench scripts run
# beside them, on a database of their own. Each chat's balance is three
# grants, so that every hold walks them in spending order (the audit below
# still finds every charge once).
run_bench "$tmp/processes.json" --servers="$servers" --baseline --clients=3 \
  --processes=2 --chats=1000 --duration=2 --warmup=0 --grants-per-chat=3 \
  --mix=cancel:10,fail:10,double:10 --min-cycles=$min_cycles \
  --server-pid="$server_pid" --reference --pgbench="$pgbench"
check_runs "$tmp/processes.json" "remote,baseline"
check_quota "$tmp/processes.json"
jq -e '.config.grants_per_chat == 3' "$tmp/processes.json" >/dev/null ||
  die "--grants-per-chat=3 not in the report: $(jq -c .config "$tmp/processes.json")"
jq -e '.config.processes == 2 and all(.runs[]; .processes == 2)
      and (.runs[] | select(.mode == "remote") | .rss_process == "server"
           and .peak_rss_kib > 0 and .rss_kib > 0)
      and (.runs[] | select(.mode == "remote") | .outcomes_by_op
           | (.cancel.ok > 0) and (.fail.ok > 0) and (.double.busy > 0))' \
  "$tmp/processes.json" >/dev/null ||
  die "--processes=2: $(cat "$tmp/processes.json")"
# The reference ran both scripts, completed transactions in the window and
# committed one cycle per per_op transaction, 100 per batch_set one; the
# comparison names the faster per-operation baseline and divides by it.
jq -e '([.reference[] | [.variant, .clients]]
          == [["per_op", 3], ["batch_set", 3]])
      and all(.reference[]; .pgbench_status == 0 and .duration_s == 2
          and .transactions > 0 and .transactions_total >= .transactions
          and .ledger_rows > 0 and .cycles_per_s > 0
          and .transactions_per_s > 0 and .latency_us.p50 > 0
          and .latency_us.p99 >= .latency_us.p50)
      and (.reference[0] | .cycles_per_transaction > 0.9
           and .cycles_per_transaction < 1.1)
      and (.reference[1] | .cycles_per_transaction > 99
           and .cycles_per_transaction < 101)
      and ([.comparisons[] | [.mode, .clients]] == [["remote", 3]])
      and all(.comparisons[];
          ([.baseline.cycles_per_s, .reference_per_op.cycles_per_s] | max)
            as $faster
          | .chargeonce.cycles_per_s > 0 and .baseline.cycles_per_s > 0
          and .reference_per_op.cycles_per_s > 0
          and .reference_batch_set.cycles_per_s > 0
          and .reference_per_op.latency_p99_us
              >= .reference_per_op.latency_p50_us
          and ((.vs_faster_per_op - .chargeonce.cycles_per_s / $faster)
               | fabs) < 1e-9 * .vs_faster_per_op
          and ((.share_of_batch_set - .chargeonce.cycles_per_s
                / .reference_batch_set.cycles_per_s) | fabs)
              < 1e-9 * .share_of_batch_set
          and (if .faster_per_op == "baseline"
               then .baseline.cycles_per_s == $faster
               else .faster_per_op == "reference_per_op"
                    and .reference_per_op.cycles_per_s == $faster end))' \
  "$tmp/processes.json" >/dev/null ||
  die "--reference: $(jq -c '{reference, comparisons}' "$tmp/processes.json")"

# Sequential order counts the chats it touched; in-process reports the
# bench's own peak RSS.
run_bench "$tmp/in_process.json" --in-process --clients=2 --chats=1000 \
  --duration=2 --warmup=0 --min-cycles=$min_cycles --chat-order=sequential \
  --idle-timeout=1
check_runs "$tmp/in_process.json" "in_process"
jq -e --argjson n "$min_cycles" '.config.chat_order == "sequential"
      and (.runs[0] | .cycles >= 2 * $n
        and .chats_touched > 0 and .chats_touched <= 1000
        and .rss_process == "bench" and .peak_rss_kib >= .rss_kib
        and .rss_kib > 0)' "$tmp/in_process.json" >/dev/null ||
  die "sequential in-process: $(cat "$tmp/in_process.json")"

# The persistence layer alone: the two per-operation modes, then one
# batched run per K. Each per-operation cycle is three round trips; each
# batched statement commits K cycles once the pipeline is full (the first
# two only reserve and start), so the counts say the batches held K cycles.
# Postgres is local here, so the backend's CPU per cycle is known.
run_bench "$tmp/alone.json" --persistence=1,5 --chats=1000 --duration=1 \
  --warmup=0 --min-cycles=$min_cycles
jq -e --argjson n "$min_cycles" '(.runs | length == 0)
      and ([.persistence[] | [.mode, .batch_cycles]]
           == [["per_operation", 0], ["functions", 0], ["batched", 1],
               ["batched", 5]])
      and all(.persistence[];
          .cycles > 0 and .cycles >= $n and .unexpected == 0
          and .duration_s > 0
          and .postgres_cpu_us_per_cycle > 0
          and .statement_latency_us.p50 > 0 and .ratio.cycles_per_s > 0
          and .ratio.postgres_cpu_per_cycle > 0
          and (if .batch_cycles == 0
               then .statements >= 3 * .cycles and .statements <= 3 * .cycles + 3
               else .cycles <= .statements * .batch_cycles
                    and .cycles >= (.statements - 2) * .batch_cycles end))
      and .persistence[0].ratio.cycles_per_s == 1' "$tmp/alone.json" \
  >/dev/null || die "--persistence: $(cat "$tmp/alone.json")"

# The sweep: 500 stuck reservations released through the supervisor's
# sweep, beside one DELETE ... RETURNING of 500 made the same way. Every
# one released (Postgres remembers each, none is left) and every one
# deleted; the rates are there and the ratio is theirs. (The server above
# does not sweep during the test, so the releases are the bench's.)
run_bench "$tmp/sweep.json" --sweep --sweep-reservations=500
jq -e '(.runs | length == 0) and (.sweep
      | .reservations == 500 and .connections == 4 and .ok
        and .sweep.released > 0 and .sweep.released_rows == 500
        and .sweep.left == 0 and .sweep.duration_s > 0
        and .sweep.releases_per_s > 0
        and .delete.deleted == 500 and .delete.duration_s > 0
        and .delete.rows_per_s > 0
        and ((.ratio - .sweep.releases_per_s / .delete.rows_per_s) | fabs)
            < 1e-9 * .ratio
        and .rss_process == "bench" and .peak_rss_kib > 0)' \
  "$tmp/sweep.json" >/dev/null || die "--sweep: $(cat "$tmp/sweep.json")"

# --statements, on a cluster of our own that loads pg_stat_statements
# (track = all) as scripts/bench's does: the test cluster does not, and
# loading it takes a restart. chargeonce's cycles (in this process: the
# server's actors and SQL, without a server's 6 s pause after each run)
# call the batch function; the baseline's run its three prepared
# statements, one each per cycle, and never the batch function.
pg_dir=$tmp/pg
chmod 755 "$tmp" # postgres must reach the cluster's directory
on_exit_stop_postgres "$pg_dir/data"
on_exit_show_log "$pg_dir/postgres.log"
# shellcheck source=scripts/lib/postgres.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib/postgres.sh"
statements_dsn=$(PG_STAT_STATEMENTS=all pg_cluster_start "$pg_dir" 2>/dev/null) ||
  die "cannot start a cluster with pg_stat_statements (see its log)"
"$bench" --postgres="$statements_dsn" --in-process --baseline --statements \
  --clients=2 --chats=1000 --duration=1 --warmup=0 \
  --min-cycles=$min_cycles --json >"$tmp/statements.json" \
  2>"$tmp/statements.json.log" || {
  cat "$tmp/statements.json.log" >&2
  die "chargeonce-bench --statements exited with $?"
}
check_runs "$tmp/statements.json" "in_process,baseline"
jq -e '.config.statements_track == "all"
      and all(.runs[]; .postgres_cpu_us_per_cycle > 0
          and (.statements | length > 0 and length <= 12)
          and all(.statements[]; (.query | type == "string"
                and length <= 80 and (test("\n") | not))
              and .calls_per_cycle > 0 and .exec_us_per_cycle >= 0
              and .rows_per_cycle >= 0))
      and (.runs[0].statements | any(.top_level
          and (.query | test("chargeonce_apply_batch"))
          and .calls_per_cycle > 0))
      and (.runs[1].statements
          | ([.[] | select(.top_level and .calls_per_cycle > 0.5)] as $top
             | ($top | length) == 3
             and all($top[]; .calls_per_cycle > 0.8
                 and .calls_per_cycle < 1.2)
             and any($top[]; .query | test("^WITH c AS \\( SELECT chat_id, coalesce\\(pockets"))
             and any($top[]; .query | test("^UPDATE reservations SET status"))
             and any($top[]; .query | test("^WITH c AS \\( SELECT chat_id, pockets FROM chats")))
          and all(.[]; .query | test("chargeonce_apply_batch") | not))' \
  "$tmp/statements.json" >/dev/null ||
  die "--statements: $(jq -c '{config, runs: [.runs[] | {mode, cycles, postgres_cpu_us_per_cycle, statements}]}' "$tmp/statements.json")"
pg_cluster_stop "$pg_dir" >/dev/null 2>&1 || true

# --statements fails before any run where pg_stat_statements is not loaded
# (the test cluster, unless someone loaded it there).
if ! psql "$dsn" -X -q -t -A -c "SHOW shared_preload_libraries" |
  grep -q pg_stat_statements; then
  status=0
  "$bench" --postgres="$dsn" --baseline --statements --chats=10 --duration=1 \
    >"$tmp/nostatements.out" 2>&1 || status=$?
  [[ $status == 1 ]] || die "--statements without pg_stat_statements exited $status, expected 1"
  grep -q "pg_stat_statements is not loaded" "$tmp/nostatements.out" ||
    die "--statements without pg_stat_statements: $(cat "$tmp/nostatements.out")"
fi

# Usage errors exit 2.
status=0
"$bench" --postgres="$dsn" --in-process --clients=zero >/dev/null 2>&1 || status=$?
[[ $status == 2 ]] || die "a bad --clients exited $status, expected 2"
status=0
"$bench" --postgres="$dsn" --in-process --processes=2 >/dev/null 2>&1 || status=$?
[[ $status == 2 ]] || die "--in-process --processes=2 exited $status, expected 2"
for bad in --persistence=0 --persistence=43 "--persistence=20 --chats=59" \
  "--baseline --pgbench=$pgbench" "--baseline --reference --reference" \
  "--in-process --client-api=async" --client-api=threads \
  "--servers=127.0.0.1:1 --client-api=async --processes=2" \
  --client-api=http \
  "--client-api=http --http=127.0.0.1:1 --http-gateway-token=x" \
  "--client-api=http ${http_flags[*]} --processes=2" \
  "--client-api=http ${http_flags[*]} --http-worker-token-file=$tmp/none" \
  "--sweep --sweep-reservations=0" "--in-process --sweep-reservations=10" \
  "--in-process --min-cycles=-1" --grants-per-chat=0 --grants-per-chat=17 \
  "--persistence=1 --statements" "--sweep --statements"; do
  status=0
  # shellcheck disable=SC2086 # $bad may hold two flags
  "$bench" --postgres="$dsn" $bad >/dev/null 2>&1 || status=$?
  [[ $status == 2 ]] || die "$bad exited $status, expected 2"
done

# A token the server does not know fails before any run, naming the answer.
status=0
"$bench" --postgres="$dsn" --client-api=http --http="127.0.0.1:$(port_of http)" \
  --http-gateway-token=not-the-gateway-token --http-worker-token-file="$tmp/worker.token" \
  --chats=10 --duration=1 >"$tmp/badtoken.out" 2>&1 || status=$?
[[ $status == 1 ]] || die "a wrong gateway token exited $status, expected 1"
grep -q "answered 401" "$tmp/badtoken.out" ||
  die "a wrong gateway token: $(cat "$tmp/badtoken.out")"

echo "bench_smoke: OK"
