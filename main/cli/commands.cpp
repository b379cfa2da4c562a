// SPDX-License-Identifier: Apache-2.0
#include "main/cli/commands.hpp"

#include "main/cli/watch.hpp"
#include "main/flags/duration.hpp"
#include "protocol/validation.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>

namespace chargeonce::cli {

namespace {

using client::role;
using api = client::client;
using preparer = std::function<action(const flag_map&)>;

// -- building requests --------------------------------------------------------

chat_id chat_flag(const flag_map& flags) {
  return int_flag<chat_id>(flags, "chat");
}

reservation_id reservation_flag(const flag_map& flags) {
  return int_flag<reservation_id>(flags, "reservation");
}

/// --max-active-jobs=N, or `default` (the plan's) and absent: none. The
/// server checks the range.
caf::optional<int32_t> job_limit_flag(const flag_map& flags) {
  auto i = flags.find("max-active-jobs");
  if (i == flags.end() || i->second == "default")
    return caf::none;
  return int_value<int32_t>("max-active-jobs", i->second);
}

/// --units=N: 1 or more (the server checks the upper bound); 0 when not
/// given, and then the call without units goes out: one unit (reserve) or
/// the whole hold (commit, resolve).
int32_t units_flag(const flag_map& flags) {
  auto units = int_flag<int32_t>(flags, "units");
  if (flags.count("units") != 0 && units < 1)
    throw usage_error("--units must be 1 or more, got "
                      + std::to_string(units));
  return units;
}

action prepare_create(const flag_map& flags) {
  chat_spec spec;
  spec.max_active_jobs = job_limit_flag(flags);
  spec.chat = chat_flag(flags);
  // The built-in pockets' own flags, as before the catalog; any pocket by
  // --pocket=NAME=N.
  for (auto [flag, name] : {std::pair{"daily-messages", pocket::daily_messages},
                            std::pair{"daily-images", pocket::daily_images},
                            std::pair{"balance", pocket::balance}})
    if (flags.count(flag) != 0)
      spec.initial.set(name, int_flag<int32_t>(flags, flag));
  pocket_flags(flags, spec.initial);
  spec.premium_until = time_flag(flags, "premium-until");
  return [spec](session& s) {
    return print_result(s, s.api.create(spec));
  };
}

action prepare_reserve(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto k = kind_flag(flags);
  auto request_id = text_flag(flags, "request-id");
  auto units = units_flag(flags);
  return [=](session& s) {
    if (units == 0)
      return print_result(s, s.api.reserve(chat, k, request_id));
    return print_result(s, s.api.reserve(chat, k, request_id, units));
  };
}

/// commit: the whole hold, or --units of it; by --worker if given.
action prepare_commit(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto id = reservation_flag(flags);
  auto units = units_flag(flags);
  auto worker = text_flag(flags, "worker");
  return [=](session& s) {
    if (!worker.empty())
      return units == 0
               ? print_result(s, s.api.commit(chat, id, worker))
               : print_result(s, s.api.commit(chat, id, units, worker));
    if (units == 0)
      return print_result(s, s.api.commit(chat, id));
    return print_result(s, s.api.commit(chat, id, units));
  };
}

/// start, heartbeat and fail: one reservation of one chat, and the worker
/// that names itself (--worker, "" when not given: the call without it).
template <class F>
preparer step(F call) {
  return [call](const flag_map& flags) -> action {
    auto chat = chat_flag(flags);
    auto id = reservation_flag(flags);
    auto worker = text_flag(flags, "worker");
    return [=](session& s) {
      return print_result(s, call(s.api, chat, id, worker));
    };
  };
}

/// status and touch: the chat alone.
template <class F>
preparer chat_only(F call) {
  return [call](const flag_map& flags) -> action {
    auto chat = chat_flag(flags);
    return [=](session& s) {
      return print_result(s, call(s.api, chat));
    };
  };
}

/// cancel: the chat's only job, or the one --reservation or --request-id
/// names.
action prepare_cancel(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto id = int_flag<reservation_id>(flags, "reservation");
  auto request_id = text_flag(flags, "request-id");
  if (id != 0 && !request_id.empty())
    throw usage_error("cancel takes --reservation or --request-id, not both");
  if (id == 0 && request_id.empty())
    return [=](session& s) {
      return print_result(s, s.api.cancel(chat));
    };
  return [=](session& s) {
    return print_result(s, s.api.cancel(chat, id, request_id));
  };
}

/// uncertain: the provider call of a started job timed out.
action prepare_uncertain(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto id = reservation_flag(flags);
  auto ref = flags.at("provider-ref");
  auto worker = text_flag(flags, "worker");
  return [=](session& s) {
    if (!worker.empty())
      return print_result(s, s.api.uncertain(chat, id, ref, worker));
    return print_result(s, s.api.uncertain(chat, id, ref));
  };
}

/// resolve: what the provider says, succeeded (of --units) or failed.
action prepare_resolve(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto id = reservation_flag(flags);
  auto outcome = flags.at("outcome");
  if (outcome != "succeeded" && outcome != "failed")
    throw usage_error("--outcome must be succeeded or failed, got '" + outcome
                      + "'");
  auto units = units_flag(flags);
  if (units != 0 && outcome == "failed")
    throw usage_error("--units goes with --outcome=succeeded");
  return [=](session& s) {
    if (units == 0)
      return print_result(s, s.api.resolve(chat, id, outcome));
    return print_result(s, s.api.resolve(chat, id, outcome, units));
  };
}

/// unresolved: one page of jobs of unknown outcome, after --after.
action prepare_unresolved(const flag_map& flags) {
  auto after = int_flag<reservation_id>(flags, "after");
  auto limit = flags.count("limit") != 0 ? int_flag<int64_t>(flags, "limit")
                                         : int64_t{100};
  if (after < 0)
    throw usage_error("--after must be a reservation id");
  if (limit < 1 || limit > int64_t{unresolved_page_max})
    throw usage_error("--limit must be 1 to 1000, got "
                      + std::to_string(limit));
  return [=](session& s) {
    return print_result(s,
                        s.api.unresolved(after, static_cast<uint32_t>(limit)));
  };
}

/// history: one page of the chat's timeline, newest first, below
/// --before (a ledger id; the previous page's next_before).
action prepare_history(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto before = int_flag<int64_t>(flags, "before");
  auto limit = flags.count("limit") != 0 ? int_flag<int64_t>(flags, "limit")
                                         : int64_t{history_page_default};
  if (before < 0)
    throw usage_error("--before must be a ledger id (next_before)");
  if (limit < 1 || limit > int64_t{history_page_max})
    throw usage_error("--limit must be 1 to 1000, got "
                      + std::to_string(limit));
  return [=](session& s) {
    return print_result(
      s, s.api.history(chat, before, static_cast<uint32_t>(limit)));
  };
}

/// --max-active-jobs=N|default and --balance-low-threshold=N|default,
/// either or both; the one not given stays as it is. The server checks the
/// ranges (a negative threshold is invalid_argument).
action prepare_set_limits(const flag_map& flags) {
  auto chat = chat_flag(flags);
  limits_update update;
  update.set_max_active_jobs = flags.count("max-active-jobs") != 0;
  update.max_active_jobs = job_limit_flag(flags);
  if (auto i = flags.find("balance-low-threshold"); i != flags.end()) {
    update.set_balance_low_threshold = true;
    if (i->second != "default")
      update.balance_low_threshold =
        int_value<int32_t>("balance-low-threshold", i->second);
  }
  if (!update.set_max_active_jobs && !update.set_balance_low_threshold)
    throw usage_error("set-limits needs --max-active-jobs, "
                      "--balance-low-threshold or both");
  return [=](session& s) {
    return print_result(s, s.api.set_limits(chat, update));
  };
}

/// The grant's terms of a top-up: --expires-in=DURATION (30d) or
/// --expires-at=ISO8601, --priority=N, --source=purchase|promo|admin. The
/// server names what is out of range.
grant_terms grant_terms_flags(const flag_map& flags) {
  grant_terms out;
  out.expires_at = time_flag(flags, "expires-at");
  if (auto i = flags.find("expires-in"); i != flags.end()) {
    if (out.expires_at)
      throw usage_error("give --expires-in or --expires-at, not both");
    auto x =
      parse_duration("expires-in", i->second, std::chrono::milliseconds{1},
                     std::chrono::milliseconds{grant_expires_in_ms_max});
    if (x % std::chrono::milliseconds{1} != std::chrono::nanoseconds{0})
      throw usage_error("--expires-in counts whole milliseconds, got '"
                        + i->second + "'");
    out.expires_in_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(x).count();
  }
  out.priority = int_flag<int32_t>(flags, "priority", grant_priority_default);
  if (auto i = flags.find("source"); i != flags.end())
    out.source = i->second;
  return out;
}

action prepare_top_up(const flag_map& flags) {
  auto chat = chat_flag(flags);
  // int64: an amount beyond the balance's range reaches the server, which
  // names the limit, instead of failing to parse here.
  auto credits = int_flag<int64_t>(flags, "credits");
  auto payment_id = flags.at("payment-id");
  auto terms = grant_terms_flags(flags);
  return [=](session& s) {
    return print_result(s, s.api.top_up(chat, credits, payment_id, terms));
  };
}

action prepare_void_grant(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto grant = int_flag<int64_t>(flags, "grant");
  auto payment_id = text_flag(flags, "payment-id");
  if ((flags.count("grant") != 0) == !payment_id.empty())
    throw usage_error("void-grant takes --grant or --payment-id, one of them");
  return [=](session& s) {
    return print_result(s, s.api.void_grant(chat, grant, payment_id));
  };
}

action prepare_set_premium(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto until = *time_flag(flags, "until");
  return [=](session& s) {
    return print_result(s, s.api.set_premium(chat, until));
  };
}

action prepare_set_flags(const flag_map& flags) {
  auto chat = chat_flag(flags);
  flags_update x{bool_flag(flags, "started"), bool_flag(flags, "blocked"),
                 bool_flag(flags, "banned")};
  return [=](session& s) {
    return print_result(s, s.api.set_flags(chat, x));
  };
}

/// watch: every event from now, or (--after, an event id a previous watch
/// printed) every kept event after that id first.
action prepare_watch(const flag_map& flags) {
  caf::optional<event_id> after;
  if (flags.count("after") != 0) {
    after = int_flag<int64_t>(flags, "after");
    if (*after < 0)
      throw usage_error("--after must be an event id (event_id)");
  }
  return [after](session& s) {
    return watch(s, after);
  };
}

// -- the table ----------------------------------------------------------------

std::vector<command> make_commands() {
  const flag_spec chat{"chat", "ID"};
  const flag_spec reservation{"reservation", "ID"};
  // The worker's identity for this attempt (e.g. its queue job id and
  // attempt): once the job runs, a call naming another is already_started.
  const flag_spec worker{"worker", "S"};
  auto boolean = [](const char* name) {
    return flag_spec{name, "true|false"};
  };
  return {
    {"create-chat",
     {chat},
     {{"daily-messages", "N"},
      {"daily-images", "N"},
      {"balance", "N"},
      {"pocket", "NAME=N"},
      {"premium-until", "ISO8601"},
      {"max-active-jobs", "N"}},
     role::admin,
     "registers a chat; --pocket (repeatable) sets any pocket",
     prepare_create},
    {"reserve",
     {chat, {"kind", "KIND"}},
     {{"request-id", "S"}, {"units", "N"}},
     role::gateway,
     "holds a job's price (--units, default 1) at enqueue",
     prepare_reserve},
    {"start",
     {chat, reservation},
     {worker},
     role::worker,
     "takes the job; from now on it cannot be cancelled",
     step([](api& c, chat_id ch, reservation_id id, const std::string& w) {
       return w.empty() ? c.start(ch, id) : c.start(ch, id, w);
     })},
    {"heartbeat",
     {chat, reservation},
     {worker},
     role::worker,
     "extends a started job's lease",
     step([](api& c, chat_id ch, reservation_id id, const std::string& w) {
       return w.empty() ? c.heartbeat(ch, id) : c.heartbeat(ch, id, w);
     })},
    {"commit",
     {chat, reservation},
     {{"units", "N"}, worker},
     role::worker,
     "charges the hold, or --units of it; retries charge no more",
     prepare_commit},
    {"fail",
     {chat, reservation},
     {worker},
     role::worker,
     "drops a started job without a charge",
     step([](api& c, chat_id ch, reservation_id id, const std::string& w) {
       return w.empty() ? c.fail(ch, id) : c.fail(ch, id, w);
     })},
    {"uncertain",
     {chat, reservation, {"provider-ref", "S"}},
     {worker},
     role::worker,
     "the provider timed out: frees the slot, keeps the hold",
     prepare_uncertain},
    {"resolve",
     {chat, reservation, {"outcome", "succeeded|failed"}},
     {{"units", "N"}},
     role::worker,
     "records the provider's answer: charge or release the hold",
     prepare_resolve},
    {"unresolved",
     {},
     {{"limit", "N"}, {"after", "ID"}},
     role::worker,
     "jobs of unknown outcome, by id: a page after --after",
     prepare_unresolved},
    {"cancel",
     {chat},
     {reservation, {"request-id", "S"}},
     role::gateway,
     "drops a queued job (the only one, or the one named)",
     prepare_cancel},
    {"status",
     {chat},
     {},
     role::gateway,
     "allowances, balance, limit and the active reservations",
     chat_only([](api& c, chat_id ch) { return c.status(ch); })},
    {"touch",
     {chat},
     {},
     role::gateway,
     "a user update; an unknown chat joins the free plan",
     chat_only([](api& c, chat_id ch) { return c.touch(ch); })},
    {"top-up",
     {chat, {"credits", "N"}, {"payment-id", "S"}},
     {{"expires-in", "DURATION"},
      {"expires-at", "ISO8601"},
      {"priority", "N"},
      {"source", "S"}},
     role::admin,
     "adds credits as a grant, once per payment id",
     prepare_top_up},
    {"void-grant",
     {chat},
     {{"grant", "ID"}, {"payment-id", "S"}},
     role::admin,
     "voids a grant (a refund): what nobody holds of it leaves",
     prepare_void_grant},
    {"set-premium",
     {chat, {"until", "ISO8601"}},
     {},
     role::admin,
     "sets when the chat's premium plan ends",
     prepare_set_premium},
    {"set-flags",
     {chat},
     {boolean("started"), boolean("blocked"), boolean("banned")},
     role::admin,
     "sets the chat's started, blocked and banned flags",
     prepare_set_flags},
    {"set-limits",
     {chat},
     {{"max-active-jobs", "N|default"}, {"balance-low-threshold", "N|default"}},
     role::admin,
     "sets the chat's job limit and its balance-low threshold",
     prepare_set_limits},
    {"history",
     {chat},
     {{"limit", "N"}, {"before", "ID"}},
     role::admin,
     "support: the chat's ledger and reservations, newest first",
     prepare_history},
    {"explain",
     {chat},
     {},
     role::admin,
     "support: pockets, plan and why, refill, deadlines, history",
     chat_only([](api& c, chat_id ch) { return c.explain(ch); })},
    {"watch",
     {},
     {{"after", "ID"}},
     role::gateway,
     "prints each event as one JSON line until interrupted",
     prepare_watch,
     true},
  };
}

// -- the usage text -----------------------------------------------------------

constexpr size_t usage_width = 72;
constexpr size_t name_width = 12;

/// The command's flags after its name, wrapped below the name's column.
void render_flags(std::ostream& out, const command& cmd) {
  std::vector<std::string> words;
  for (const auto& x : cmd.required)
    words.push_back("--" + x.name + "=" + x.value);
  for (const auto& x : cmd.optional)
    words.push_back("[--" + x.name + "=" + x.value + "]");
  const std::string indent(2 + name_width, ' ');
  size_t column = indent.size();
  for (const auto& word : words) {
    if (column > indent.size() && column + 1 + word.size() > usage_width) {
      out << '\n' << indent;
      column = indent.size();
    }
    if (column > indent.size()) {
      out << ' ';
      ++column;
    }
    out << word;
    column += word.size();
  }
}

void render_command(std::ostream& out, const command& cmd) {
  auto name = cmd.name;
  name.resize(std::max(name.size(), name_width), ' ');
  out << "  " << name;
  auto help = std::string{name_of(cmd.role)} + ": " + cmd.help;
  if (cmd.required.empty() && cmd.optional.empty()) {
    out << help << '\n';
    return;
  }
  render_flags(out, cmd);
  out << '\n' << std::string(2 + name_width, ' ') << help << '\n';
}

std::string make_usage() {
  std::ostringstream out;
  out << R"(usage: chargeonce-cli --server=HOST:PORT | --servers=H1:P1,H2:P2
                      [--timeout=DURATION]
                      [--tls --ca=FILE --cert=FILE --key=FILE]
                      COMMAND [--FLAG=VALUE ...]

commands, each with the role whose port serves it (--port serves all):
)";
  for (const auto& cmd : commands())
    render_command(out, cmd);
  out << R"(
Prints one JSON object on stdout (watch: one per event). Exit status: 0
success, 1 service error ({"error":"busy",...}), 2 usage or connection
error. --timeout defaults to 15s and takes 1s to 24h: a number of
seconds (90) or a number with a unit, as the server takes durations:
1500ms, 90s, 3min, 1h (also ns, us). Global flags may come before or
after the command.
)";
  return out.str();
}

} // namespace

const std::vector<command>& commands() {
  static const std::vector<command> table = make_commands();
  return table;
}

const command* find_command(std::string_view name) {
  const auto& xs = commands();
  auto i = std::find_if(xs.begin(), xs.end(),
                        [&](const command& x) { return x.name == name; });
  return i == xs.end() ? nullptr : &*i;
}

const char* name_of(client::role x) {
  switch (x) {
  case role::gateway:
    return "gateway";
  case role::worker:
    return "worker";
  case role::admin:
    return "admin";
  case role::all:
    return "all";
  }
  return "all";
}

const std::string& usage_text() {
  static const std::string text = make_usage();
  return text;
}

} // namespace chargeonce::cli
