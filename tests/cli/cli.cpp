// SPDX-License-Identifier: Apache-2.0
// chargeonce-cli's one table of commands: the usage text lists each entry,
// parsing refuses what the table does not allow, and a usage error exits 2
// before anything connects.
#include "main/cli/cli.hpp"

#include "main/cli/args.hpp"
#include "main/cli/commands.hpp"
#include "main/cli/output.hpp"
#include "protocol/errors.hpp"
#include "tests/support/argv.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::cli;

namespace {

/// argv for `args` after chargeonce-cli.
test::argv_of cli_argv(std::vector<std::string> args) {
  return test::argv_of{std::move(args), "chargeonce-cli"};
}

invocation parse(std::vector<std::string> args) {
  auto a = cli_argv(std::move(args));
  return parse_args(a.argc(), a.argv());
}

/// What report_failure prints for `err`: stdout, stderr and the exit code.
struct printed {
  std::string out;
  std::string err;
  int code = -1;
};

printed report(const caf::error& err) {
  caf::actor_system_config cfg;
  client::prepare_config(cfg);
  caf::actor_system sys{cfg};
  client::client api{sys, {}};
  session s{api, sys, std::chrono::seconds(1), "nowhere"};
  std::ostringstream out;
  std::ostringstream errs;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(errs.rdbuf());
  printed x;
  x.code = report_failure(s, err);
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  x.out = out.str();
  x.err = errs.str();
  return x;
}

/// The message of the usage_error that parse() throws, or "" when none.
std::string refusal(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const usage_error& e) {
    return e.what();
  }
  return {};
}

/// run_cli's exit status and stdout (stderr swallowed).
struct outcome {
  int status = -1;
  std::string out;
};

outcome run(std::vector<std::string> args) {
  auto a = cli_argv(std::move(args));
  std::ostringstream out;
  std::ostringstream err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  outcome result;
  result.status = run_cli(a.argc(), a.argv());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  result.out = out.str();
  return result;
}

/// --name=1 for every required flag of `cmd` but `skip`.
std::vector<std::string> required_args(const command& cmd,
                                       const std::string& skip = {}) {
  std::vector<std::string> out{"--server=127.0.0.1:1", cmd.name};
  for (const auto& x : cmd.required)
    if (x.name != skip)
      out.push_back("--" + x.name + "=1");
  return out;
}

/// The lines of the usage text's entry for `name`: its own and those
/// indented below it.
std::string usage_entry(const std::string& text, const std::string& name) {
  std::istringstream in{text};
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  " + name + " ", 0) == 0)
      out = line;
    else if (!out.empty() && line.rfind("   ", 0) == 0)
      out += "\n" + line;
    else if (!out.empty())
      break;
  }
  return out;
}

} // namespace

TEST_SUITE("cli") {

  TEST_CASE("every command of the table appears in the usage text with its "
            "flags and role") {
    const auto& text = usage_text();
    for (const auto& cmd : commands()) {
      CAPTURE(cmd.name);
      auto entry = usage_entry(text, cmd.name);
      REQUIRE_FALSE(entry.empty());
      for (const auto& x : cmd.required)
        CHECK(entry.find("--" + x.name + "=" + x.value) != std::string::npos);
      for (const auto& x : cmd.optional)
        CHECK(entry.find("[--" + x.name + "=" + x.value + "]")
              != std::string::npos);
      CHECK(entry.find(std::string{name_of(cmd.role)} + ": ")
            != std::string::npos);
    }
  }

  TEST_CASE("the usage text names the accepted --timeout forms") {
    const auto& text = usage_text();
    CHECK(text.find("[--timeout=DURATION]") != std::string::npos);
    CHECK(text.find("1500ms, 90s, 3min, 1h") != std::string::npos);
  }

  TEST_CASE("the usage text fits 80 columns") {
    std::istringstream in{usage_text()};
    for (std::string line; std::getline(in, line);) {
      CAPTURE(line);
      CHECK(line.size() <= 80);
    }
  }

  TEST_CASE("every command connects with one role's facade") {
    for (const auto& cmd : commands()) {
      CAPTURE(cmd.name);
      CHECK(cmd.role != client::role::all);
      CHECK(cmd.prepare);
      CHECK_FALSE(cmd.help.empty());
    }
    CHECK(find_command("reserve")->role == client::role::gateway);
    CHECK(find_command("watch")->role == client::role::gateway);
    CHECK(find_command("commit")->role == client::role::worker);
    CHECK(find_command("top-up")->role == client::role::admin);
  }

  TEST_CASE("commands are found by their exact name only") {
    for (const auto& cmd : commands())
      CHECK(find_command(cmd.name) == &cmd);
    CHECK(find_command("") == nullptr);
    CHECK(find_command("Status") == nullptr);
    CHECK(find_command("stat") == nullptr);
  }

  TEST_CASE("only watch runs until a signal") {
    for (const auto& cmd : commands())
      CHECK(cmd.until_signal == (cmd.name == "watch"));
  }

  TEST_CASE("an unknown command is a usage error, not status") {
    CHECK(refusal({"--server=127.0.0.1:1", "frobnicate", "--chat=1"})
          == "unknown command 'frobnicate'");
    auto r = run({"--server=127.0.0.1:1", "frobnicate", "--chat=1"});
    CHECK(r.status == 2);
    CHECK(r.out
          == "{\"error\":\"usage\",\"message\":\"unknown command "
             "'frobnicate'\"}\n");
  }

  TEST_CASE("a missing command is a usage error") {
    CHECK(refusal({"--server=127.0.0.1:1"}) == "missing command");
    CHECK(run({}).status == 2);
  }

  TEST_CASE("a missing required flag is a usage error naming the flag") {
    for (const auto& cmd : commands())
      for (const auto& x : cmd.required) {
        CAPTURE(cmd.name);
        CHECK(refusal(required_args(cmd, x.name))
              == cmd.name + " needs --" + x.name);
      }
    auto r = run({"--server=127.0.0.1:1", "reserve", "--chat=1"});
    CHECK(r.status == 2);
    CHECK(r.out
          == "{\"error\":\"usage\",\"message\":\"reserve needs --kind\"}\n");
  }

  TEST_CASE("a flag the command does not take is a usage error naming it") {
    for (const auto& cmd : commands()) {
      CAPTURE(cmd.name);
      auto args = required_args(cmd);
      args.push_back("--no-such-flag=1");
      CHECK(refusal(args) == cmd.name + " does not take --no-such-flag");
    }
    CHECK(refusal({"--server=127.0.0.1:1", "status", "--chat=1", "--kind=text"})
          == "status does not take --kind");
    CHECK(refusal({"--server=127.0.0.1:1", "watch", "--chat=1"})
          == "watch does not take --chat");
  }

  TEST_CASE("every command takes its required and optional flags") {
    for (const auto& cmd : commands()) {
      CAPTURE(cmd.name);
      auto args = required_args(cmd);
      for (const auto& x : cmd.optional)
        args.push_back("--" + x.name + "=1");
      auto inv = parse(args);
      CHECK(inv.cmd == &cmd);
      CHECK(inv.flags.size() == cmd.required.size() + cmd.optional.size());
    }
  }

  TEST_CASE("global flags may come before or after the command") {
    auto before = parse({"--server=h:1", "--timeout=3", "status", "--chat=7"});
    auto after = parse({"status", "--chat=7", "--timeout=3", "--server=h:1"});
    CHECK(before.globals == after.globals);
    CHECK(before.flags == after.flags);
    CHECK(before.flags == flag_map{{"chat", "7"}});
  }

  TEST_CASE("a flag given twice and a second command are usage errors") {
    CHECK(refusal({"status", "--chat=1", "--chat=2"}) == "--chat given twice");
    CHECK(refusal({"status", "reserve", "--chat=1"})
          == "unexpected argument 'reserve' (command is 'status')");
    CHECK(refusal({"status", "--chat"})
          == "expected --name=value, got '--chat'");
  }

  TEST_CASE("--timeout takes the server's duration forms, bare numbers as "
            "seconds") {
    using namespace std::chrono;
    auto timeout = [](const std::string& text) {
      return parse_connection({{"server", "h:1"}, {"timeout", text}}).timeout;
    };
    CHECK(parse_connection({{"server", "h:1"}}).timeout == seconds{15});
    CHECK(timeout("90") == seconds{90});
    CHECK(timeout("90s") == seconds{90});
    CHECK(timeout("1500ms") == milliseconds{1500});
    CHECK(timeout("3min") == minutes{3});
    CHECK(timeout("1h") == hours{1});
    CHECK(timeout("86400") == hours{24});
    CHECK_THROWS_WITH_AS(timeout("0"),
                         "--timeout must be between 1s and 24h, got '0'",
                         usage_error);
    CHECK_THROWS_WITH_AS(timeout("25h"),
                         "--timeout must be between 1s and 24h, got '25h'",
                         usage_error);
    CHECK_THROWS_AS(timeout("1.5x"), usage_error);
  }

  TEST_CASE("a bad value is a usage error before anything connects") {
    // Port 1 refuses connections: a connection error would exit 2 too, but
    // print {"error":"connection",...}.
    auto r = run({"--server=127.0.0.1:1", "reserve", "--chat=1", "--kind=X"});
    CHECK(r.status == 2);
    CHECK(r.out
          == "{\"error\":\"usage\",\"message\":\"--kind must be a kind of "
             "the server's catalog ([a-z][a-z0-9_]{0,31}), got 'X'\"}\n");
    r = run({"--server=127.0.0.1:1", "--timeout=90x", "status", "--chat=1"});
    CHECK(r.status == 2);
    CHECK(r.out.rfind("{\"error\":\"usage\",\"message\":\"--timeout takes ", 0)
          == 0);
  }

  TEST_CASE("top-up's --expires-in takes the duration forms with days, "
            "whole milliseconds, and not together with --expires-at") {
    auto top_up = [](const std::string& extra) {
      return run({"--server=127.0.0.1:1", "top-up", "--chat=1", "--credits=5",
                  "--payment-id=p", extra});
    };
    auto r = top_up("--expires-in=30x");
    CHECK(r.status == 2);
    CHECK(r.out.rfind("{\"error\":\"usage\",\"message\":\"--expires-in "
                      "takes ",
                      0)
          == 0);
    r = top_up("--expires-in=1500us");
    CHECK(r.status == 2);
    CHECK(r.out.find("whole milliseconds") != std::string::npos);
    r = top_up("--expires-in=0s");
    CHECK(r.status == 2);
    CHECK(r.out.find("must be between 1ms and") != std::string::npos);
    r = run({"--server=127.0.0.1:1", "top-up", "--chat=1", "--credits=5",
             "--payment-id=p", "--expires-in=30d",
             "--expires-at=2999-01-01T00:00:00Z"});
    CHECK(r.status == 2);
    CHECK(r.out.find("not both") != std::string::npos);
    // Well formed, it gets as far as connecting (port 1 refuses).
    r = top_up("--expires-in=30d");
    CHECK(r.out.find("\"usage\"") == std::string::npos);
  }

  TEST_CASE("void-grant names --grant or --payment-id, one of them") {
    auto usage = [](std::vector<std::string> extra) {
      std::vector<std::string> args{"--server=127.0.0.1:1", "void-grant",
                                    "--chat=1"};
      args.insert(args.end(), extra.begin(), extra.end());
      auto r = run(args);
      return r.status == 2 && r.out.find("one of them") != std::string::npos;
    };
    CHECK(usage({}));
    CHECK(usage({"--grant=3", "--payment-id=p"}));
    CHECK_FALSE(usage({"--grant=3"}));
    CHECK_FALSE(usage({"--payment-id=p"}));
  }

  TEST_CASE("--units of reserve and commit is 1 or more, an integer") {
    for (auto cmd :
         {std::vector<std::string>{"reserve", "--chat=1", "--kind=image"},
          std::vector<std::string>{"commit", "--chat=1", "--reservation=2"}}) {
      auto args = cmd;
      args.insert(args.begin(), "--server=127.0.0.1:1");
      args.push_back("--units=0");
      auto r = run(args);
      CHECK(r.status == 2);
      CHECK(r.out
            == "{\"error\":\"usage\",\"message\":\"--units must be 1 or "
               "more, got 0\"}\n");
      args.back() = "--units=two";
      r = run(args);
      CHECK(r.status == 2);
      CHECK(r.out
            == "{\"error\":\"usage\",\"message\":\"--units must be an "
               "integer, got 'two'\"}\n");
    }
  }

  TEST_CASE("resolve takes --outcome=succeeded|failed, --units with "
            "succeeded only; unresolved and history a --limit of 1 to "
            "1000") {
    auto usage = [](std::vector<std::string> args, const std::string& why) {
      args.insert(args.begin(), "--server=127.0.0.1:1");
      auto r = run(args);
      CHECK(r.status == 2);
      CHECK(r.out == "{\"error\":\"usage\",\"message\":\"" + why + "\"}\n");
    };
    usage({"resolve", "--chat=1", "--reservation=2", "--outcome=maybe"},
          "--outcome must be succeeded or failed, got 'maybe'");
    usage({"resolve", "--chat=1", "--reservation=2", "--outcome=failed",
           "--units=2"},
          "--units goes with --outcome=succeeded");
    usage({"resolve", "--chat=1", "--reservation=2", "--outcome=succeeded",
           "--units=0"},
          "--units must be 1 or more, got 0");
    usage({"unresolved", "--limit=0"}, "--limit must be 1 to 1000, got 0");
    usage({"unresolved", "--limit=1001"},
          "--limit must be 1 to 1000, got 1001");
    usage({"unresolved", "--after=-1"}, "--after must be a reservation id");
    usage({"uncertain", "--chat=1", "--reservation=2"},
          "uncertain needs --provider-ref");
    usage({"history", "--chat=1", "--limit=0"},
          "--limit must be 1 to 1000, got 0");
    usage({"history", "--chat=1", "--limit=1001"},
          "--limit must be 1 to 1000, got 1001");
    usage({"history", "--chat=1", "--before=-1"},
          "--before must be a ledger id (next_before)");
    usage({"history", "--limit=5"}, "history needs --chat");
    usage({"explain"}, "explain needs --chat");
    // Valid: as far as connecting (port 1 refuses).
    auto r = run({"--server=127.0.0.1:1", "resolve", "--chat=1",
                  "--reservation=2", "--outcome=succeeded", "--units=3"});
    CHECK(r.status == 2);
    CHECK(r.out.rfind("{\"error\":\"connection\"", 0) == 0);
  }

  TEST_CASE("cancel names its job by --reservation or --request-id, not "
            "both; set-limits takes a number or `default`") {
    auto r = run({"--server=127.0.0.1:1", "cancel", "--chat=1",
                  "--reservation=2", "--request-id=x"});
    CHECK(r.status == 2);
    CHECK(r.out
          == "{\"error\":\"usage\",\"message\":\"cancel takes --reservation "
             "or --request-id, not both\"}\n");
    r = run({"--server=127.0.0.1:1", "set-limits", "--chat=1",
             "--max-active-jobs=two"});
    CHECK(r.status == 2);
    CHECK(r.out
          == "{\"error\":\"usage\",\"message\":\"--max-active-jobs must be "
             "an integer, got 'two'\"}\n");
    // `default` is the plan's limit: valid, so the command gets as far as
    // connecting (port 1 refuses).
    r = run({"--server=127.0.0.1:1", "set-limits", "--chat=1",
             "--max-active-jobs=default"});
    CHECK(r.status == 2);
    CHECK(r.out.rfind("{\"error\":\"connection\"", 0) == 0);
    // The balance-low threshold alone (the job limit stays), a number or
    // `default`; one of the two is needed.
    r = run({"--server=127.0.0.1:1", "set-limits", "--chat=1",
             "--balance-low-threshold=default"});
    CHECK(r.status == 2);
    CHECK(r.out.rfind("{\"error\":\"connection\"", 0) == 0);
    r = run({"--server=127.0.0.1:1", "set-limits", "--chat=1",
             "--balance-low-threshold=low"});
    CHECK(r.status == 2);
    CHECK(r.out
          == "{\"error\":\"usage\",\"message\":\"--balance-low-threshold "
             "must be an integer, got 'low'\"}\n");
    r = run({"--server=127.0.0.1:1", "set-limits", "--chat=1"});
    CHECK(r.status == 2);
    CHECK(r.out
          == "{\"error\":\"usage\",\"message\":\"set-limits needs "
             "--max-active-jobs, --balance-low-threshold or both\"}\n");
  }

  TEST_CASE("--pocket=NAME=N may be repeated and keeps its values in order; "
            "a pocket given twice or a malformed one is a usage error") {
    auto inv = parse({"create-chat", "--chat=1", "--pocket=daily_voice=2",
                      "--balance=3", "--pocket=minutes=40"});
    CHECK(list_flag(inv.flags, "pocket")
          == std::vector<std::string>{"daily_voice=2", "minutes=40"});
    pockets got;
    pocket_flags(inv.flags, got);
    pockets want;
    want.set("daily_voice", 2);
    want.set("minutes", 40);
    CHECK(got == want);
    CHECK(list_flag(inv.flags, "balance") == std::vector<std::string>{"3"});
    CHECK(list_flag(inv.flags, "chat-none").empty());
    auto usage = [](std::vector<std::string> args) {
      auto r = run(std::move(args));
      CHECK(r.status == 2);
      return r.out;
    };
    CHECK(usage({"--server=127.0.0.1:1", "create-chat", "--chat=1",
                 "--balance=1", "--pocket=balance=2"})
          == "{\"error\":\"usage\",\"message\":\"pocket balance given "
             "twice\"}\n");
    CHECK(usage({"--server=127.0.0.1:1", "create-chat", "--chat=1",
                 "--pocket=Voice=2"})
          == "{\"error\":\"usage\",\"message\":\"--pocket must be NAME=N "
             "with NAME a pocket name ([a-z][a-z0-9_]{0,31}), got "
             "'Voice=2'\"}\n");
    CHECK(usage({"--server=127.0.0.1:1", "create-chat", "--chat=1",
                 "--pocket=voice=x"})
          == "{\"error\":\"usage\",\"message\":\"--pocket=voice must be "
             "an integer, got 'x'\"}\n");
    // Only --pocket repeats.
    CHECK(refusal({"create-chat", "--chat=1", "--balance=1", "--balance=2"})
          == "--balance given twice");
  }

  TEST_CASE("--help prints the usage text on stdout and exits 0") {
    auto r = run({"status", "--help"});
    CHECK(r.status == 0);
    CHECK(r.out == usage_text());
  }

  TEST_CASE("storage_unavailable prints its JSON and tells people to retry "
            "with the same ids") {
    auto x = report(caf::make_error(ec::storage_unavailable, "apply: gone"));
    CHECK(x.code == exit_service);
    CHECK(nlohmann::json::parse(x.out).at("error") == "storage_unavailable");
    CHECK(x.err.find("storage_unavailable") != std::string::npos);
    CHECK(x.err.find("may or may not have been written") != std::string::npos);
    CHECK(x.err.find("retry with the same ids (reserve with the same "
                     "request_id, commit with the same reservation)")
          != std::string::npos);
  }

  TEST_CASE("internal prints its JSON and says it is a bug, not retried") {
    auto x = report(caf::make_error(ec::internal,
                                    "apply: internal error, see server log "
                                    "id=7"));
    CHECK(x.code == exit_service);
    auto js = nlohmann::json::parse(x.out);
    CHECK(js.at("error") == "internal");
    CHECK(js.at("message") == "apply: internal error, see server log id=7");
    CHECK(x.err.find("a bug in the server") != std::string::npos);
    CHECK(x.err.find("not retried automatically") != std::string::npos);
  }

  TEST_CASE("an answer that settles the outcome gets no advice") {
    auto x = report(caf::make_error(ec::busy, "chat 1 has reservation 2"));
    CHECK(x.code == exit_service);
    CHECK(x.err.empty());
  }
}
