// SPDX-License-Identifier: Apache-2.0
// GET /metrics must parse: every line of render() is checked by a strict
// validator of Prometheus' text format 0.0.4 (which is itself tested on
// broken input). And the numbers must move when real actors work: client
// operations through a facade, sweeps, releases, queue notices, restarts
// and passivations, on the deterministic scheduler with the fake store.
#include "actors/metrics.hpp"

#include "actors/facade_actor.hpp"
#include "actors/supervisor_actor.hpp"
#include "protocol/errors.hpp"
#include "tests/support/fixture.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

using namespace chargeonce;
using namespace std::chrono_literals;
using test::deterministic_fixture;

namespace {

// -- a strict exposition format validator -------------------------------------

using labels_t = std::map<std::string, std::string>;

struct parsed_sample {
  std::string name;
  labels_t labels;
  double value = 0;
};

bool matches(const std::string& x, const char* pattern) {
  return std::regex_match(x, std::regex{pattern});
}

bool is_metric_name(const std::string& x) {
  return matches(x, "[a-zA-Z_:][a-zA-Z0-9_:]*");
}

bool is_label_name(const std::string& x) {
  return matches(x, "[a-zA-Z_][a-zA-Z0-9_]*") && x.rfind("__", 0) != 0;
}

/// Go's ParseFloat as Prometheus accepts it, without hex forms.
bool parse_float(const std::string& x, double& out) {
  if (!matches(x, R"([+-]?(Inf|NaN|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?))"))
    return false;
  if (x.find("Inf") != std::string::npos)
    out = x[0] == '-' ? -INFINITY : INFINITY;
  else if (x == "NaN")
    out = NAN;
  else
    out = std::stod(x);
  return true;
}

/// `name{a="x",b="y"} value [timestamp]`; an empty string when it parses.
std::string parse_sample(const std::string& line, parsed_sample& out) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ')
    ++i;
  out.name = line.substr(0, i);
  if (!is_metric_name(out.name))
    return "bad metric name '" + out.name + "'";
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      auto eq = line.find('=', i);
      if (eq == std::string::npos)
        return "label without '='";
      auto key = line.substr(i, eq - i);
      if (!is_label_name(key))
        return "bad label name '" + key + "'";
      i = eq + 1;
      if (i >= line.size() || line[i] != '"')
        return "label value not quoted";
      std::string value;
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] != '\\') {
          value += line[i];
          continue;
        }
        if (++i == line.size())
          return "dangling backslash";
        if (line[i] == 'n')
          value += '\n';
        else if (line[i] == '\\' || line[i] == '"')
          value += line[i];
        else
          return std::string{"bad escape \\"} + line[i];
      }
      if (i == line.size())
        return "unterminated label value";
      if (!out.labels.emplace(key, value).second)
        return "label '" + key + "' twice";
      ++i; // closing quote
      if (i < line.size() && line[i] == ',')
        ++i;
      else if (i >= line.size() || line[i] != '}')
        return "expected ',' or '}' after a label";
    }
    if (i == line.size())
      return "unterminated label set";
    ++i;
  }
  if (i >= line.size() || line[i] != ' ')
    return "expected one space before the value";
  std::istringstream rest{line.substr(i + 1)};
  std::string value, timestamp, extra;
  rest >> value >> timestamp >> extra;
  if (line.substr(i + 1).find("  ") != std::string::npos || !extra.empty())
    return "trailing garbage";
  if (!parse_float(value, out.value))
    return "bad value '" + value + "'";
  if (!timestamp.empty() && !matches(timestamp, "-?[0-9]+"))
    return "bad timestamp '" + timestamp + "'";
  return {};
}

/// One histogram series (a label set without `le`).
struct histogram_series {
  std::vector<std::pair<double, double>> buckets; ///< (le, cumulative count)
  bool has_sum = false;
  double count = -1;
};

class validator {
public:
  /// Empty when `text` is valid; else the first problem, with its line.
  std::string check(const std::string& text) {
    if (text.empty() || text.back() != '\n')
      return "text must end with a line feed";
    std::istringstream in{text};
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n)
      if (auto why = check_line(line); !why.empty())
        return "line " + std::to_string(n) + ": " + why + ": " + line;
    return finish_family();
  }

private:
  std::map<std::string, std::string> types_;
  std::set<std::string> helped_;
  std::set<std::string> done_; ///< families whose lines are over
  std::set<std::string> series_;
  std::string current_;
  std::map<labels_t, histogram_series> histograms_;

  std::string check_line(const std::string& line) {
    if (line.empty())
      return "empty line";
    if (line[0] == '#')
      return check_comment(line);
    parsed_sample s;
    if (auto why = parse_sample(line, s); !why.empty())
      return why;
    return check_sample(s);
  }

  /// Starts the lines of `family`; each family's lines are contiguous.
  std::string enter(const std::string& family) {
    if (family == current_)
      return {};
    if (auto why = finish_family(); !why.empty())
      return why;
    if (done_.count(family))
      return "lines of '" + family + "' are not contiguous";
    current_ = family;
    return {};
  }

  std::string check_comment(const std::string& line) {
    std::istringstream in{line};
    std::string hash, keyword, name, rest;
    in >> hash >> keyword >> name;
    std::getline(in, rest);
    if (hash != "#" || (keyword != "HELP" && keyword != "TYPE"))
      return "a comment other than HELP or TYPE";
    if (!is_metric_name(name))
      return "bad metric name in " + keyword;
    if (auto why = enter(name); !why.empty())
      return why;
    if (keyword == "HELP") {
      if (!helped_.insert(name).second)
        return "second HELP";
      if (rest.size() < 2 || rest[0] != ' ')
        return "empty HELP";
      for (size_t i = 1; i < rest.size(); ++i)
        if (rest[i] == '\\'
            && (++i == rest.size() || (rest[i] != '\\' && rest[i] != 'n')))
          return "bad escape in HELP";
      return {};
    }
    auto type = rest.size() > 1 ? rest.substr(1) : std::string{};
    static const std::set<std::string> known = {"counter", "gauge", "histogram",
                                                "summary", "untyped"};
    if (!known.count(type))
      return "unknown type '" + type + "'";
    if (types_.count(name))
      return "second TYPE";
    for (const auto& s : series_)
      if (s.rfind(name, 0) == 0)
        return "TYPE after samples";
    types_[name] = type;
    return {};
  }

  /// The family a sample belongs to: its own name, or a histogram's base.
  std::string family_of(const std::string& name) const {
    if (types_.count(name))
      return name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string s{suffix};
      if (name.size() > s.size()
          && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        auto base = name.substr(0, name.size() - s.size());
        auto i = types_.find(base);
        if (i != types_.end() && i->second == "histogram")
          return base;
      }
    }
    return {};
  }

  std::string check_sample(const parsed_sample& s) {
    auto family = family_of(s.name);
    if (family.empty())
      return "sample before its TYPE";
    if (auto why = enter(family); !why.empty())
      return why;
    std::ostringstream key;
    key << s.name;
    for (const auto& [k, v] : s.labels)
      key << '|' << k << '=' << v;
    if (!series_.insert(key.str()).second)
      return "duplicate series";
    const auto& type = types_[family];
    if (type == "counter") {
      if (s.name.size() < 6 || s.name.substr(s.name.size() - 6) != "_total")
        return "counter name without _total";
      if (!(s.value >= 0) || std::isinf(s.value))
        return "counter value not a finite non-negative number";
    }
    if (type == "histogram")
      return check_histogram_sample(family, s);
    return {};
  }

  std::string check_histogram_sample(const std::string& family,
                                     const parsed_sample& s) {
    auto labels = s.labels;
    if (s.name == family + "_bucket") {
      auto le = labels.find("le");
      if (le == labels.end())
        return "bucket without le";
      double bound = 0;
      if (!parse_float(le->second, bound))
        return "bad le";
      labels.erase(le);
      auto& h = histograms_[labels];
      if (!h.buckets.empty() && !(bound > h.buckets.back().first))
        return "le not increasing";
      if (!h.buckets.empty() && s.value < h.buckets.back().second)
        return "buckets not cumulative";
      h.buckets.emplace_back(bound, s.value);
      return {};
    }
    if (labels.count("le"))
      return "le outside a bucket";
    auto& h = histograms_[labels];
    if (s.name == family + "_sum")
      h.has_sum = true;
    else
      h.count = s.value;
    return {};
  }

  std::string finish_family() {
    if (!current_.empty())
      done_.insert(current_);
    for (const auto& [labels, h] : histograms_) {
      if (h.buckets.empty() || !std::isinf(h.buckets.back().first))
        return current_ + ": buckets do not end with le=\"+Inf\"";
      if (!h.has_sum || h.count < 0)
        return current_ + ": _sum or _count missing";
      if (h.count != h.buckets.back().second)
        return current_ + ": _count differs from the +Inf bucket";
    }
    histograms_.clear();
    return {};
  }
};

std::string validate(const std::string& text) {
  return validator{}.check(text);
}

/// The value of one series in rendered text (`name{labels}` exactly as
/// rendered), or -1 when it is absent.
double value_of(const std::string& text, const std::string& series) {
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line))
    if (line.size() > series.size()
        && line.compare(0, series.size(), series) == 0
        && line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  return -1;
}

/// Reads a series now and tells how much it moved since; an absent series
/// (an error outcome not seen yet) counts as 0.
struct probe {
  std::string series;
  double before = 0;
  explicit probe(std::string name) : series(std::move(name)) { before = now(); }
  double now() const {
    return std::max(0.0, value_of(metrics::render(), series));
  }
  double moved() const { return now() - before; }
};

std::string ops(const char* op, const char* outcome) {
  return std::string{"chargeonce_operations_total{operation=\""} + op
         + "\",outcome=\"" + outcome + "\"}";
}

std::string duration_bucket(const char* op, const char* le) {
  return std::string{
           "chargeonce_operation_duration_seconds_bucket{operation=\""}
         + op + "\",le=\"" + le + "\"}";
}

// -- a server's actors on the deterministic scheduler -------------------------

struct server_fixture : deterministic_fixture {
  supervisor_options options = [] {
    supervisor_options x;
    x.connections = 1;
    x.chat = chat_options{5s, 600s, 5s};
    return x;
  }();
  supervisor_actor root;
  caf::actor gateway;
  caf::actor worker;
  caf::actor all_roles;

  server_fixture() {
    auto factory = [this] {
      return caf::actor_cast<persistence_actor>(
        sys.spawn(test::fake_persistence, log));
    };
    root = sys.spawn(make_supervisor, factory, options);
    sched.run();
    auto rh = self->request(root, caf::infinite, atom::api_v);
    sched.run();
    auto api = *receive<api_actor>(rh);
    gateway = caf::actor_cast<caf::actor>(sys.spawn(make_gateway, api));
    worker = caf::actor_cast<caf::actor>(sys.spawn(make_worker, api));
    all_roles = caf::actor_cast<caf::actor>(sys.spawn(make_api_facade, api));
  }

  ~server_fixture() {
    for (auto& x : {gateway, worker, all_roles})
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(fake_actor, caf::exit_reason::user_shutdown);
    sched.run();
  }

  template <class T, class... Ts>
  caf::expected<T> ask(const caf::actor& dst, Ts... xs) {
    auto rh = self->request(dst, caf::infinite, xs...);
    sched.run();
    return receive<T>(rh);
  }
};

} // namespace

TEST_SUITE("metrics") {

  TEST_CASE("the validator refuses what Prometheus would refuse") {
    const std::string type = "# TYPE x_total counter\n";
    CHECK(validate(type + "x_total 1\n").empty());
    CHECK(validate(type + "x_total{a=\"q\\\"\\\\\\n\"} 1.5e3\n").empty());
    CHECK_FALSE(validate("x_total 1\n").empty());      // no TYPE
    CHECK_FALSE(validate(type + "x_total 1").empty()); // no final newline
    CHECK_FALSE(validate(type + "x-total 1\n").empty());
    CHECK_FALSE(validate(type + "x_total{1a=\"q\"} 1\n").empty());
    CHECK_FALSE(validate(type + "x_total{a=\"q} 1\n").empty());
    CHECK_FALSE(validate(type + "x_total{a=\"\\t\"} 1\n").empty());
    CHECK_FALSE(validate(type + "x_total{a=q} 1\n").empty());
    CHECK_FALSE(validate(type + "x_total one\n").empty());
    CHECK_FALSE(validate(type + "x_total -1\n").empty());
    CHECK_FALSE(validate(type + "x_total 1\nx_total 2\n").empty());
    CHECK_FALSE(validate(type + "x_total 1\n" + type).empty());
    CHECK_FALSE(
      validate("# TYPE x gauge\nx 1\n# TYPE y gauge\ny 1\nx 2\n").empty());
    const std::string h = "# TYPE h histogram\n";
    CHECK(validate(h
                   + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
                     "h_sum 3\nh_count 2\n")
            .empty());
    CHECK_FALSE(validate(h
                         + "h_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\n"
                           "h_sum 3\nh_count 2\n")
                  .empty()); // not cumulative
    CHECK_FALSE(validate(h + "h_bucket{le=\"1\"} 1\nh_sum 3\nh_count 1\n")
                  .empty()); // no +Inf
    CHECK_FALSE(validate(h + "h_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 1\n")
                  .empty()); // count differs
    CHECK_FALSE(validate(h
                         + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
                           "h_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 1\n")
                  .empty()); // le not increasing
  }

  TEST_CASE("label values and help texts are escaped") {
    using metrics::detail::escape_help;
    using metrics::detail::escape_label_value;
    CHECK(escape_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
    CHECK(escape_help("a\"b\\c\nd") == "a\"b\\\\c\\nd");
    CHECK(metrics::detail::format_value(0.005) == "0.005");
    CHECK(metrics::detail::format_value(60) == "60");
    CHECK(metrics::detail::format_value(INFINITY) == "+Inf");
  }

  TEST_CASE("every line of the rendered metrics is valid exposition format") {
    // Touch every family, including the ones only the store's side feeds.
    metrics::record_operation(metrics::operation::reserve,
                              caf::make_error(ec::busy), 3ms);
    metrics::record_operation(metrics::operation::commit,
                              caf::make_error(caf::sec::runtime_error), 2s);
    metrics::count_release("lease_expired");
    metrics::count_release("surprise");
    metrics::observe_persistence_batch(3);
    metrics::observe_persistence_batch(1000);
    {
      metrics::queue_depth_share share;
      share.set(5);
      CHECK(value_of(metrics::render(), "chargeonce_persistence_queue_depth")
            >= 5);
    }
    metrics::set_active_reservations(7);
    auto text = metrics::render();
    INFO(text);
    CHECK(validate(text) == "");
    CHECK(value_of(text, ops("reserve", "busy")) >= 1);
    CHECK(value_of(text, ops("commit", "other")) >= 1);
    CHECK(value_of(text, "chargeonce_releases_total{reason=\"other\"}") >= 1);
    CHECK(value_of(text, "chargeonce_active_reservations") == 7);
    CHECK(
      value_of(text, "chargeonce_persistence_batch_size_bucket{le=\"+Inf\"}")
      >= 2);
    for (const char* family :
         {"chargeonce_operations_total",
          "chargeonce_operation_duration_seconds",
          "chargeonce_queue_notices_total", "chargeonce_releases_total",
          "chargeonce_reactivations_total", "chargeonce_sweeps_total",
          "chargeonce_persistence_restarts_total",
          "chargeonce_storage_errors_total", "chargeonce_chat_actors",
          "chargeonce_passivations_total", "chargeonce_persistence_batch_size",
          "chargeonce_persistence_queue_depth",
          "chargeonce_active_reservations"})
      CHECK_MESSAGE(text.find(std::string{"# TYPE "} + family + " ")
                      != std::string::npos,
                    family);
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "operations through a facade count by outcome and time "
                    "their latency") {
    probe reserved{ops("reserve", "ok")};
    probe committed{ops("commit", "ok")};
    probe refused{ops("reserve", "invalid_argument")};
    probe created{ops("create", "ok")};
    probe reserve_timed{
      "chargeonce_operation_duration_seconds_count{operation=\"reserve\"}"};
    probe actors{"chargeonce_chat_actors"};
    auto r = ask<reservation>(gateway, atom::reserve_v, chat_id{21}, kind::text,
                              std::string{"job"});
    REQUIRE(r);
    REQUIRE(ask<receipt>(worker, atom::commit_v, chat_id{21}, r->id));
    CHECK_FALSE(ask<reservation>(gateway, atom::reserve_v, chat_id{0},
                                 kind::text, std::string{}));
    REQUIRE(ask<chat_status>(all_roles, atom::create_v,
                             chat_spec{22, {}, caf::none}));
    CHECK(reserved.moved() == 1);
    CHECK(committed.moved() == 1);
    CHECK(refused.moved() == 1);
    CHECK(created.moved() == 1);
    CHECK(reserve_timed.moved() == 2); // refusals are timed too
    CHECK(actors.moved() == 2);        // chats 21 and 22; 0 never spawns
    CHECK(validate(metrics::render()) == "");
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "latency is measured from arrival to answer") {
    probe fast{duration_bucket("status", "0.25")};
    probe slow{duration_bucket("status", "0.5")};
    log->hold = true;
    auto rh =
      self->request(gateway, caf::infinite, atom::status_v, chat_id{23});
    sched.run();
    sched.advance_time(300ms); // Postgres takes its time
    release();
    REQUIRE(receive<chat_status>(rh));
    CHECK(fast.moved() == 0);
    CHECK(slow.moved() == 1);
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "a sweep, its releases and a queue notice are counted") {
    probe sweeps{"chargeonce_sweeps_total"};
    probe released{"chargeonce_releases_total{reason=\"sweep_timeout\"}"};
    probe notices{"chargeonce_queue_notices_total"};
    log->pages.push_back(
      {sweep_candidate{24, sweep_cursor{sweep_phase::lease, 1, 240}}});
    auto rh = self->request(root, caf::infinite, atom::sweep_v);
    sched.run();
    auto released_now = receive<uint64_t>(rh);
    REQUIRE(released_now);
    CHECK(*released_now == 1);
    CHECK(sweeps.moved() == 1);
    CHECK(released.moved() == 1); // the fake store's reason
    log->active = 1;
    REQUIRE(ask<reservation>(gateway, atom::reserve_v, chat_id{25}, kind::text,
                             std::string{}));
    sched.advance_time(options.chat.queue_notice_delay);
    sched.run();
    CHECK(notices.moved() == 1);
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "passivation and persistence restarts are counted") {
    probe passivated{"chargeonce_passivations_total"};
    probe actors{"chargeonce_chat_actors"};
    probe restarts{"chargeonce_persistence_restarts_total"};
    REQUIRE(ask<chat_status>(gateway, atom::status_v, chat_id{26}));
    CHECK(actors.moved() == 1);
    sched.advance_time(options.chat.idle_timeout);
    sched.run();
    CHECK(passivated.moved() == 1);
    CHECK(actors.moved() == 0); // the actor really terminated
    // spawned[0] is the fixture's own fake; [1] serves chats, [2] sweeps.
    caf::anon_send_exit(log->spawned[1], caf::exit_reason::kill);
    sched.run();
    CHECK(restarts.moved() == 1);
    sched.advance_time(options.restart_backoff_min);
    sched.run();
  }
}
