// SPDX-License-Identifier: Apache-2.0
#include "actors/metrics.hpp"

#include "protocol/errors.hpp"

#include <caf/error.hpp>
#include <caf/sec.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cmath>

namespace chargeonce::metrics {

namespace {

constexpr auto relaxed = std::memory_order_relaxed;

// -- building blocks ----------------------------------------------------------

struct counter {
  std::atomic<uint64_t> value{0};
  void add(uint64_t n = 1) { value.fetch_add(n, relaxed); }
  uint64_t get() const { return value.load(relaxed); }
};

struct gauge {
  std::atomic<int64_t> value{0};
  void add(int64_t n) { value.fetch_add(n, relaxed); }
  void set(int64_t n) { value.store(n, relaxed); }
  int64_t get() const { return value.load(relaxed); }
};

/// Fixed upper bounds (`le`), a count per bucket (not cumulative: one
/// increment per observation) and the sum. The +Inf bucket and `_count` are
/// both the total of the buckets at render time, so they always agree.
template <size_t N>
class histogram {
public:
  using bounds_type = std::array<double, N>;

  void observe(const bounds_type& bounds, double x) {
    auto i = std::lower_bound(bounds.begin(), bounds.end(), x) - bounds.begin();
    buckets_[static_cast<size_t>(i)].fetch_add(1, relaxed);
    auto sum = sum_.load(relaxed);
    while (!sum_.compare_exchange_weak(sum, sum + x, relaxed))
      ; // another thread added meanwhile: retry with its sum
  }

  /// Cumulative counts, the last one being +Inf.
  std::array<uint64_t, N + 1> cumulative() const {
    std::array<uint64_t, N + 1> out{};
    uint64_t total = 0;
    for (size_t i = 0; i <= N; ++i)
      out[i] = total += buckets_[i].load(relaxed);
    return out;
  }

  double sum() const { return sum_.load(relaxed); }

private:
  std::array<std::atomic<uint64_t>, N + 1> buckets_{}; ///< last: above all
  std::atomic<double> sum_{0};
};

// -- label sets ---------------------------------------------------------------

constexpr std::array<const char*, operation_count> operation_names = {
  "create",      "reserve",   "start",     "heartbeat", "commit",
  "fail",        "cancel",    "status",    "touch",     "top_up",
  "set_premium", "set_flags", "subscribe",
};

/// Outcome slots: 0 is ok, then one per chargeonce::ec code (their names
/// from to_string, so a code appended later gets its own label), then the
/// CAF errors a relay can see, then everything else.
constexpr size_t ec_slots_max = 32;
constexpr size_t slot_timeout = ec_slots_max;
constexpr size_t slot_receiver_down = ec_slots_max + 1;
constexpr size_t slot_other = ec_slots_max + 2;
constexpr size_t outcome_slots = ec_slots_max + 3;

/// The label of each outcome slot; empty for codes chargeonce does not have.
const std::array<std::string, outcome_slots>& outcome_names() {
  static const auto names = [] {
    std::array<std::string, outcome_slots> out;
    out[0] = "ok";
    for (size_t i = 1; i < ec_slots_max; ++i)
      if (std::string name = to_string(static_cast<ec>(i)); name != "unknown")
        out[i] = name;
    out[slot_timeout] = caf::to_string(caf::sec::request_timeout);
    out[slot_receiver_down] = caf::to_string(caf::sec::request_receiver_down);
    out[slot_other] = "other";
    return out;
  }();
  return names;
}

size_t outcome_slot(const caf::error& err) {
  if (!err)
    return 0;
  if (err.category() == caf::atom(error_category_name)) {
    auto code = static_cast<size_t>(err.code());
    return code < ec_slots_max && !outcome_names()[code].empty() ? code
                                                                 : slot_other;
  }
  if (err == caf::sec::request_timeout)
    return slot_timeout;
  if (err == caf::sec::request_receiver_down)
    return slot_receiver_down;
  return slot_other;
}

constexpr std::array<const char*, 3> release_reasons = {
  "lease_expired", "sweep_timeout", "other"};

// -- the registry -------------------------------------------------------------

/// From 1 ms (a local Postgres round trip) to the facades' 60 s relay
/// timeout.
constexpr std::array<double, 14> latency_bounds = {
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60};

/// Powers of two up to a large batch.
constexpr std::array<double, 10> batch_bounds = {1,  2,  4,   8,   16,
                                                 32, 64, 128, 256, 512};

std::array<std::array<counter, outcome_slots>, operation_count> operations;
std::array<histogram<latency_bounds.size()>, operation_count> durations;
counter queue_notices;
std::array<counter, release_reasons.size()> releases;
counter reactivations;
counter sweeps;
counter persistence_restarts;
counter storage_errors;
counter passivations;
gauge chat_actors;
histogram<batch_bounds.size()> batch_sizes;
gauge queue_depth;
gauge active_reservations;
std::atomic<bool> active_reservations_known{false};

// -- rendering ----------------------------------------------------------------

using label = std::pair<const char*, std::string_view>;

void family(std::string& out, const char* name, const char* type,
            const char* help) {
  out.append("# HELP ").append(name).append(" ");
  out.append(detail::escape_help(help)).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, std::string_view name,
            std::initializer_list<label> labels, const std::string& value) {
  out.append(name);
  if (labels.size() > 0) {
    out.push_back('{');
    bool first = true;
    for (const auto& [key, val] : labels) {
      if (!first)
        out.push_back(',');
      first = false;
      out.append(key).append("=\"");
      out.append(detail::escape_label_value(val)).append("\"");
    }
    out.push_back('}');
  }
  out.append(" ").append(value).append("\n");
}

std::string num(uint64_t x) {
  return std::to_string(x);
}

std::string num(int64_t x) {
  return std::to_string(x);
}

/// The samples of one histogram series; `extra` is its own label, if any.
template <size_t N>
void histogram_samples(std::string& out, const std::string& name,
                       const std::array<double, N>& bounds,
                       const histogram<N>& h, const label* extra) {
  auto counts = h.cumulative();
  for (size_t i = 0; i <= N; ++i) {
    auto le = i < N ? detail::format_value(bounds[i]) : std::string{"+Inf"};
    if (extra)
      sample(out, name + "_bucket", {*extra, {"le", le}}, num(counts[i]));
    else
      sample(out, name + "_bucket", {{"le", le}}, num(counts[i]));
  }
  auto sum = detail::format_value(h.sum());
  auto count = num(counts[N]);
  if (extra) {
    sample(out, name + "_sum", {*extra}, sum);
    sample(out, name + "_count", {*extra}, count);
  } else {
    sample(out, name + "_sum", {}, sum);
    sample(out, name + "_count", {}, count);
  }
}

void render_operations(std::string& out) {
  family(out, "chargeonce_operations_total", "counter",
         "Client operations answered, by operation and outcome (ok or the "
         "error name). Series with outcome ok always exist; error series "
         "appear with their first occurrence.");
  const auto& outcomes = outcome_names();
  for (size_t op = 0; op < operation_count; ++op)
    for (size_t slot = 0; slot < outcome_slots; ++slot) {
      auto n = operations[op][slot].get();
      if (slot == 0 || n > 0)
        sample(
          out, "chargeonce_operations_total",
          {{"operation", operation_names[op]}, {"outcome", outcomes[slot]}},
          num(n));
    }
  family(out, "chargeonce_operation_duration_seconds", "histogram",
         "Time from a client operation's arrival at the server to its answer, "
         "by operation.");
  for (size_t op = 0; op < operation_count; ++op) {
    label l{"operation", operation_names[op]};
    histogram_samples(out, "chargeonce_operation_duration_seconds",
                      latency_bounds, durations[op], &l);
  }
}

void render_counter(std::string& out, const char* name, const char* help,
                    const counter& c) {
  family(out, name, "counter", help);
  sample(out, name, {}, num(c.get()));
}

void render_gauge(std::string& out, const char* name, const char* help,
                  const gauge& g) {
  family(out, name, "gauge", help);
  sample(out, name, {}, num(g.get()));
}

void render_background(std::string& out) {
  render_counter(out, "chargeonce_queue_notices_total",
                 "queue_notice events published.", queue_notices);
  family(out, "chargeonce_releases_total", "counter",
         "Reservations released by the sweeper, by reason.");
  for (size_t i = 0; i < release_reasons.size(); ++i)
    if (releases[i].get() > 0 || i + 1 < release_reasons.size())
      sample(out, "chargeonce_releases_total", {{"reason", release_reasons[i]}},
             num(releases[i].get()));
  render_counter(out, "chargeonce_reactivations_total",
                 "Quiet chats refilled and invited back (limits_refilled).",
                 reactivations);
  render_counter(out, "chargeonce_sweeps_total", "Sweep runs completed.",
                 sweeps);
  render_counter(out, "chargeonce_persistence_restarts_total",
                 "Persistence actors (one Postgres connection each) restarted "
                 "after they died.",
                 persistence_restarts);
  render_counter(out, "chargeonce_storage_errors_total",
                 "Operations Postgres failed: lost connection, timeout or an "
                 "unexpected SQL error (storage_unavailable).",
                 storage_errors);
  render_gauge(out, "chargeonce_chat_actors", "Chat actors resident in memory.",
               chat_actors);
  render_counter(out, "chargeonce_passivations_total",
                 "Idle chat actors passivated.", passivations);
}

void render_persistence(std::string& out) {
  family(out, "chargeonce_persistence_batch_size", "histogram",
         "Client operations carried by one Postgres round trip.");
  histogram_samples(out, "chargeonce_persistence_batch_size", batch_bounds,
                    batch_sizes, nullptr);
  render_gauge(out, "chargeonce_persistence_queue_depth",
               "Operations waiting in persistence actors for Postgres.",
               queue_depth);
  if (active_reservations_known.load(relaxed))
    render_gauge(out, "chargeonce_active_reservations",
                 "Active reservations in Postgres (all servers).",
                 active_reservations);
}

} // namespace

// -- recording ----------------------------------------------------------------

const char* to_string(operation op) {
  auto i = static_cast<size_t>(op);
  return i < operation_names.size() ? operation_names[i] : "unknown";
}

void record_operation(operation op, const caf::error& err,
                      std::chrono::nanoseconds elapsed) {
  auto i = static_cast<size_t>(op);
  operations[i][outcome_slot(err)].add();
  durations[i].observe(latency_bounds,
                       std::chrono::duration<double>(elapsed).count());
}

void count_queue_notice() {
  queue_notices.add();
}

void count_release(std::string_view reason) {
  size_t i = 0;
  while (i + 1 < release_reasons.size() && reason != release_reasons[i])
    ++i;
  releases[i].add();
}

void count_reactivations(uint64_t chats) {
  reactivations.add(chats);
}

void count_sweep() {
  sweeps.add();
}

void count_persistence_restart() {
  persistence_restarts.add();
}

void count_storage_error() {
  storage_errors.add();
}

void count_passivation() {
  passivations.add();
}

void chat_actor_started() {
  chat_actors.add(1);
}

void chat_actor_stopped() {
  chat_actors.add(-1);
}

void observe_persistence_batch(size_t operations) {
  batch_sizes.observe(batch_bounds, static_cast<double>(operations));
}

queue_depth_share::~queue_depth_share() {
  queue_depth.add(-current_);
}

void queue_depth_share::set(int64_t depth) {
  queue_depth.add(depth - current_);
  current_ = depth;
}

void set_active_reservations(int64_t n) {
  active_reservations.set(n);
  active_reservations_known.store(true, relaxed);
}

std::string render() {
  std::string out;
  out.reserve(32 * 1024);
  render_operations(out);
  render_background(out);
  render_persistence(out);
  return out;
}

// -- text format details ------------------------------------------------------

namespace detail {

std::string escape_label_value(std::string_view x) {
  std::string out;
  out.reserve(x.size());
  for (auto c : x)
    switch (c) {
    case '\\':
      out += "\\\\";
      break;
    case '"':
      out += "\\\"";
      break;
    case '\n':
      out += "\\n";
      break;
    default:
      out += c;
    }
  return out;
}

std::string escape_help(std::string_view x) {
  std::string out;
  out.reserve(x.size());
  for (auto c : x)
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  return out;
}

std::string format_value(double x) {
  if (std::isnan(x))
    return "NaN";
  if (std::isinf(x))
    return x > 0 ? "+Inf" : "-Inf";
  // Shortest text that reads back as the same double ("0.005", not
  // "0.0050000000000000001"); integral values print without exponent.
  std::array<char, 64> buf;
  auto [end, err] = std::to_chars(buf.data(), buf.data() + buf.size(), x,
                                  std::abs(x) < 1e15 && x == std::floor(x)
                                    ? std::chars_format::fixed
                                    : std::chars_format::general);
  (void)err; // 64 characters hold any double
  return std::string(buf.data(), end);
}

} // namespace detail

} // namespace chargeonce::metrics
