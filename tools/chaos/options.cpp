// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/options.hpp"

#include "main/flags/duration.hpp"

#include <charconv>
#include <filesystem>
#include <unistd.h>

namespace chargeonce::chaos {

const char* const usage_text =
  R"(usage: chargeonce-chaos [--seed=N] [--duration=DURATION] [--servers=N]
                        [--faults=LIST] [--json=PATH] [--postgres=DSN]
                        [--postgres-ha [--ha-cluster=PATH]
                        [--ha-port-base=PORT]] [--server=PATH] [--data-dir=DIR] [--chats=N]
                        [--min-acknowledged=OP:N,...]
                        [--gateways=N] [--workers=N] [--catalog=WHICH]
                        [--self-test-violation] [--self-test-pocket-move]
                        [--self-test-over-capture]
                        [--self-test-cancel-charged]
                        [--self-test-uncertain-charged]
                        [--self-test-uncertain-left]
                        [--self-test-ledger-chain] [--self-test-lost-event]
                        [--self-test-grant-left] [--self-test-sole-grant]
                        [--self-test-grant-conserved]
                        [--self-test-hold-expired]
                        [--self-test-grant-order] [--self-test-void-twice]
                        [--self-test-lost-commit]
                        [--self-test-second-start]
                        [--self-test-window-paid-twice]

Starts Postgres (an embedded cluster under DATA-DIR/postgres, unless
--postgres) and N chargeonce-server processes, drives them with simulated
gateways, workers and an admin while injecting faults, then audits Postgres
against its record of every request and answer.

  --seed       seeds the workload and the fault schedule (default 1)
  --duration   how long the chaos lasts at least (default 60s, at most
               168h), then a drain and the audit; longer when every enabled
               fault coming once, or --min-acknowledged, takes longer
  --servers    chargeonce-server processes (default 2)
  --faults     comma-separated, default all: kill-server, terminate-backend,
               restart-postgres, pause-postgres, drop-connection, kill-worker,
               failover, failover-node (restart/pause-postgres need the
               embedded cluster, failover and failover-node --postgres-ha)
  --json       also write the summary as JSON to PATH
  --postgres   use this database instead of an embedded cluster
  --postgres-ha   run on a pg_auto_failover formation (a primary and its
               synchronous standby) under DATA-DIR/ha instead, made by
               --ha-cluster (default: scripts/ha-cluster of the source tree
               this binary was built in); the fault failover kills the
               primary's Postgres (-9) and waits for the standby's promotion,
               failover-node kills its whole node (pg_autoctl too) and
               starts it again once the standby is promoted
  --ha-port-base   the formation's ports: PORT (monitor), +1, +2 (default:
               from the seed, above the ephemeral port range; a formation
               kept in DATA-DIR/ha is started again only on its own ports)
  --server     the chargeonce-server binary (default: next to this one)
  --data-dir   cluster, server logs and port files (default var/chaos)
  --chats      chats the gateways use (default 48)
  --min-acknowledged   after --duration, go on until the record holds at
               least N acknowledged requests of each OP named (e.g.
               commit:50,top_up:20; OP as the summary names them); a
               harness error if that takes more than 180 s more
  --gateways   simulated gateway threads (default 4)
  --workers    simulated worker threads (default 8)
  --catalog    what the servers sell: builtin (text and image, default),
               generated (kinds and pockets drawn from the seed, written to
               DATA-DIR/catalog.json) or the path of a catalog file
  --self-test-violation   plant a forged ledger row before the audit: the
               run must then report violations (tests the auditor)
  --self-test-pocket-move   move one credit into a daily pocket before the
               audit, no total changed: conservation per pocket must see it
  --self-test-over-capture   make one commit of fewer units than held
               charge its whole hold before the audit, every total kept:
               the check of each charge against its units must see it
  --self-test-cancel-charged   write a ledger charge for one job a cancel
               acknowledged as cancelled while queued: the check that such
               a job is never charged must see it
  --self-test-uncertain-charged   write a ledger charge for one job that
               went uncertain and was never resolved succeeded
  --self-test-uncertain-left   reopen one settled job of unknown outcome
               after the drain: nothing may be left uncertain
  --self-test-ledger-chain   add a credit to the pockets one ledger row
               records, no change and no pocket touched: the check that
               each row starts where the one before it ended must see it
  --self-test-grant-left   charge one credit of a grant, the balance
               pocket untouched: the check that the balance is what the
               chat's grants have left must see it
  --self-test-sole-grant   name another chat's grant as the sole grant of
               a chat: the check that a chat's sole grant is its one live
               grant with credits nobody holds must see it
  --self-test-grant-conserved   give one grant a credit more and a charge
               more, no ledger row: the check of each grant against the
               ledger's rows naming it must see it
  --self-test-hold-expired   move the expiry of a grant a charge held to
               before that job's reservation was created: the check that
               nothing new is held from an expired grant must see it
  --self-test-grant-order   make a charge whose hold spans three grants
               pass over its second one (what it took of it taken of the
               last one, every total kept): the check of the spending
               order must see it
  --self-test-void-twice   write a second void row of a voided grant: the
               check that each expiry and void happens once must see it
  --self-test-lost-event   delete one event before the audit (in a run
               without any, write one that no change made): the check that
               each change has its one event must see it
  --self-test-second-start   add to the record, before the audit, a start
               acknowledged to a second worker for a job another worker
               started: the check that a job delivered twice runs once
               must see it
  --self-test-window-paid-twice   reserve and start a job on a chat of its
               own just before its window is due and commit it after a
               refill, then make its charge take its daily part from the
               new window's pockets too (its change, the ledger's pockets
               and the chat's alike, every total kept), as a commit that
               ignores hold windows would: the check that a job is paid by
               the window its hold was taken in must see it
  --self-test-lost-commit   with --postgres-ha: the servers connect with
               synchronous_commit = local, and each failover first stalls
               replication for 3 s (SIGSTOP of the primary's walsenders):
               what the primary acknowledged meanwhile is lost with it, and
               the check that every acknowledged commit is charged must see
               it (run with --faults=failover). A job of its own is
               reserved, started and committed while the walsenders are
               stopped, so that there is always such a commit
With --postgres-ha the forgeries are written through the formation and
repeated, like every statement of the tool, when its primary moves: only
those a repeat cannot forge twice (--self-test-violation,
--self-test-cancel-charged, --self-test-uncertain-charged: a charge keyed
by its reservation id) are taken.

The servers refuse a cancel of a started job (too_late) for some kinds and
ask its worker to stop for others (cancel_after_start: request): image of
the built-in catalog; the last kind of a generated one and every other
kind before it. Workers that learn of a request abort, commit anyway, or
commit one unit. A tenth of the jobs' provider calls time out: the worker
calls uncertain, and a reconciler resolves two in three of them (either
way, twice, both ways at once, some after the servers' 6 s
reconcile-timeout); the sweep releases the rest.

DURATION: a number of seconds (90) or a number with a unit, as the server
takes durations: 1500ms, 90s, 3min, 1h (also ns, us), in whole seconds.

Exit status: 0 no violation, 1 a violation (or the harness failed), 2 usage.
)";

namespace {

/// A week of chaos at most.
constexpr int64_t duration_max_s = int64_t{7} * 86400;

std::vector<fault> parse_faults(const std::string& text) {
  std::vector<fault> out;
  size_t from = 0;
  while (from <= text.size()) {
    auto comma = text.find(',', from);
    auto item = text.substr(from, comma == std::string::npos ? std::string::npos
                                                             : comma - from);
    fault f;
    if (!fault_from_string(item, f))
      throw usage_error("--faults: unknown fault '" + item + "'");
    out.push_back(f);
    if (comma == std::string::npos)
      break;
    from = comma + 1;
  }
  return out;
}

/// "commit:50,top_up:20".
std::vector<std::pair<op, uint64_t>> parse_counts(const std::string& name,
                                                  const std::string& text) {
  std::vector<std::pair<op, uint64_t>> out;
  size_t from = 0;
  while (from < text.size()) {
    auto comma = text.find(',', from);
    auto item = text.substr(from, comma == std::string::npos ? std::string::npos
                                                             : comma - from);
    auto colon = item.find(':');
    op what;
    if (colon == std::string::npos
        || !op_from_string(item.substr(0, colon), what))
      throw usage_error(std::string{"--"}
                          .append(name)
                          .append(": expected OP:N, got '")
                          .append(item)
                          .append("'"));
    out.emplace_back(
      what, parse_int<uint64_t>(name, item.substr(colon + 1), 0, 100'000'000));
    if (comma == std::string::npos)
      break;
    from = comma + 1;
  }
  return out;
}

std::string next_to_self(const std::string& name) {
  std::error_code err;
  auto self = std::filesystem::read_symlink("/proc/self/exe", err);
  return (self.parent_path() / name).string();
}

void apply(chaos_options& o, const std::string& name, const std::string& v) {
  if (name == "seed")
    o.seed = parse_int<uint64_t>(name, v, 0, UINT64_MAX);
  else if (name == "duration")
    o.duration_s = parse_duration_seconds(name, v, 1, duration_max_s);
  else if (name == "servers")
    o.servers = parse_int<size_t>(name, v, 1, 16);
  else if (name == "faults") {
    o.faults = v.empty() ? std::vector<fault>{} : parse_faults(v);
    o.faults_given = true;
  } else if (name == "json")
    o.json_path = v;
  else if (name == "postgres")
    o.postgres = v;
  else if (name == "ha-cluster")
    o.ha_cluster = v;
  else if (name == "ha-port-base")
    o.ha_port_base = parse_int<int>(name, v, 1024, 65533);
  else if (name == "server")
    o.server = v;
  else if (name == "data-dir")
    o.data_dir = v;
  else if (name == "catalog")
    o.catalog = v;
  else if (name == "kind") // the worker process's kind
    o.worker.kind = v;
  else if (name == "chats")
    o.chats = parse_int<int64_t>(name, v, 1, 100000);
  else if (name == "min-acknowledged")
    o.min_acknowledged = parse_counts(name, v);
  else if (name == "gateways")
    o.gateways = parse_int<size_t>(name, v, 1, 64);
  else if (name == "workers")
    o.workers = parse_int<size_t>(name, v, 1, 64);
  else if (name == "servers-list") // the worker process's servers
    o.worker.servers = v;
  else if (name == "chat")
    o.worker.chat = parse_int<int64_t>(name, v, INT64_MIN, INT64_MAX);
  else if (name == "key")
    o.worker.key = parse_int<uint64_t>(name, v, 0, UINT64_MAX);
  else
    throw usage_error("unknown option --" + name);
}

} // namespace

chaos_options parse_options(int argc, char** argv) {
  chaos_options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg == "--self-test-pocket-move") {
      o.self_test_pocket_move = true;
      continue;
    }
    if (arg == "--self-test-over-capture") {
      o.self_test_over_capture = true;
      continue;
    }
    if (arg == "--self-test-cancel-charged") {
      o.self_test_cancel_charged = true;
      continue;
    }
    if (arg == "--self-test-uncertain-charged") {
      o.self_test_uncertain_charged = true;
      continue;
    }
    if (arg == "--self-test-uncertain-left") {
      o.self_test_uncertain_left = true;
      continue;
    }
    if (arg == "--self-test-ledger-chain") {
      o.self_test_ledger_chain = true;
      continue;
    }
    if (arg == "--self-test-grant-left") {
      o.self_test_grant_left = true;
      continue;
    }
    if (arg == "--self-test-sole-grant") {
      o.self_test_sole_grant = true;
      continue;
    }
    if (arg == "--self-test-grant-conserved") {
      o.self_test_grant_conserved = true;
      continue;
    }
    if (arg == "--self-test-hold-expired") {
      o.self_test_hold_expired = true;
      continue;
    }
    if (arg == "--self-test-grant-order") {
      o.self_test_grant_order = true;
      continue;
    }
    if (arg == "--self-test-void-twice") {
      o.self_test_void_twice = true;
      continue;
    }
    if (arg == "--self-test-lost-event") {
      o.self_test_lost_event = true;
      continue;
    }
    if (arg == "--self-test-second-start") {
      o.self_test_second_start = true;
      continue;
    }
    if (arg == "--self-test-window-paid-twice") {
      o.self_test_window_paid_twice = true;
      continue;
    }
    if (arg == "--self-test-lost-commit") {
      o.self_test_lost_commit = true;
      continue;
    }
    if (arg == "--self-test-violation") {
      o.self_test_violation = true;
      continue;
    }
    if (arg == "--postgres-ha") {
      o.postgres_ha = true;
      continue;
    }
    if (arg == "--worker-process") {
      o.worker_process = true;
      continue;
    }
    auto eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos || eq == 2)
      throw usage_error("expected --name=value, got '" + arg + "'");
    auto name = arg.substr(2, eq - 2);
    // The worker process takes the server list as --servers too.
    if (o.worker_process && name == "servers")
      name = "servers-list";
    apply(o, name, arg.substr(eq + 1));
  }
  if (!o.faults_given)
    for (size_t i = 0; i < fault_count; ++i)
      o.faults.push_back(static_cast<fault>(i));
  if (o.server.empty())
    o.server = next_to_self("chargeonce-server");
  if (o.ha_cluster.empty())
    o.ha_cluster =
      std::filesystem::path{next_to_self("../../scripts/ha-cluster")}
        .lexically_normal()
        .string();
  if (o.postgres_ha && !o.postgres.empty())
    throw usage_error("--postgres-ha makes its own Postgres: drop --postgres");
  if (o.self_test_lost_commit && !o.postgres_ha)
    throw usage_error("--self-test-lost-commit needs --postgres-ha");
  // These rewrite "the first row of a kind" of the range: repeated after a
  // failover lost the answer, one would forge a second row.
  if (o.postgres_ha
      && (o.self_test_pocket_move || o.self_test_over_capture
          || o.self_test_uncertain_left || o.self_test_ledger_chain
          || o.self_test_lost_event || o.self_test_window_paid_twice
          || o.self_test_grant_left || o.self_test_sole_grant
          || o.self_test_grant_conserved || o.self_test_hold_expired
          || o.self_test_grant_order || o.self_test_void_twice))
    throw usage_error("with --postgres-ha only the forgeries keyed by a "
                      "reservation id (--self-test-violation, "
                      "--self-test-cancel-charged, "
                      "--self-test-uncertain-charged) and "
                      "--self-test-lost-commit are taken");
  if (o.worker_process)
    o.worker.seed = o.seed;
  return o;
}

} // namespace chargeonce::chaos
