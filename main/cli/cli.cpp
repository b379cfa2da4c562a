// SPDX-License-Identifier: Apache-2.0
// chargeonce-cli: sends one request to a chargeonce-server and prints the
// answer as one JSON line. Exit status: 0 success, 1 service error (the
// server said no), 2 usage or connection error.
#include "main/cli/cli.hpp"

#include "client/client.hpp"
#include "main/cli/args.hpp"
#include "main/cli/commands.hpp"
#include "main/cli/output.hpp"
#include "main/cli/watch.hpp"

#include <caf/all.hpp>

#include <csignal>
#include <iostream>
#include <string>
#include <vector>

namespace chargeonce::cli {

namespace {

int report_usage(const std::string& what) {
  print_line({{"error", "usage"}, {"message", what}});
  std::cerr << "chargeonce-cli: " << what << "\n\n" << usage_text();
  return exit_usage;
}

/// CAF never sees argv: its parser rejects options it does not know.
struct cli_config : caf::actor_system_config {
  explicit cli_config(const client::tls_files& tls) {
    client::prepare_config(*this, tls);
    set("scheduler.max-threads", 2);
  }
};

std::string label_of(const std::vector<client::endpoint>& servers) {
  std::string out;
  for (const auto& x : servers)
    out += (out.empty() ? "" : ",") + x.label();
  return out;
}

/// Connects with the command's role and runs its action.
int run(const command& cmd, const connection_flags& conn, const action& act) {
  client::options opts;
  opts.servers = conn.servers;
  opts.facade = cmd.role;
  opts.timeout = conn.timeout;
  opts.tls = conn.tls.on();
  cli_config cfg{conn.tls};
  caf::actor_system sys{cfg};
  client::client api{sys, opts};
  session s{api, sys, opts.timeout, label_of(opts.servers)};
  return act(s);
}

} // namespace

} // namespace chargeonce::cli

namespace chargeonce {

int run_cli(int argc, char** argv) {
  using namespace cli;
  if (wants_help(argc, argv)) {
    std::cout << usage_text();
    return exit_ok;
  }
  try {
    auto inv = parse_args(argc, argv);
    auto conn = parse_connection(inv.globals); // before anything connects
    auto act = inv.cmd->prepare(inv.flags);
    if (inv.cmd->until_signal) {
      auto signals = watch_signals();
      pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    }
    return run(*inv.cmd, conn, act);
  } catch (const usage_error& e) {
    return report_usage(e.what());
  }
}

} // namespace chargeonce
