// SPDX-License-Identifier: Apache-2.0
#include "actors/metrics/rendering.hpp"

#include "actors/metrics/process.hpp"
#include "actors/metrics/series.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <utility>

namespace chargeonce::metrics {

namespace {

using namespace detail;

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
      auto n = series.operations[op][slot].get();
      if (slot == 0 || n > 0)
        sample(out, "chargeonce_operations_total",
               {{"operation", operation_table[op].name},
                {"outcome", outcomes[slot]}},
               num(n));
    }
  // Every series exists from the start, so an alert on any increase
  // fires on the first bug.
  family(out, "chargeonce_internal_errors_total", "counter",
         "Client operations answered internal, by operation: a bug in the "
         "server, logged at critical level with the id the answer names.");
  for (size_t op = 0; op < operation_count; ++op)
    sample(out, "chargeonce_internal_errors_total",
           {{"operation", operation_table[op].name}},
           num(series.internal_errors[op].get()));
  family(out, "chargeonce_operation_duration_seconds", "histogram",
         "Time from a client operation's arrival at the server to its answer, "
         "by operation.");
  for (size_t op = 0; op < operation_count; ++op) {
    label l{"operation", operation_table[op].name};
    histogram_samples(out, "chargeonce_operation_duration_seconds",
                      latency_bounds, series.durations[op], &l);
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
                 "queue_notice events published.", series.queue_notices);
  render_counter(out, "chargeonce_cancel_requests_total",
                 "cancel_requested events published: started jobs a user "
                 "cancelled.",
                 series.cancel_requests);
  render_counter(out, "chargeonce_reconcile_needed_total",
                 "reconcile_needed events published: jobs whose provider "
                 "outcome became unknown.",
                 series.reconcile_needed);
  render_counter(out, "chargeonce_event_subscribers_cut_off_total",
                 "Event subscribers cut off for leaving events unanswered "
                 "(subscriber-timeout); they resume after their last id.",
                 series.subscribers_cut_off);
  family(out, "chargeonce_releases_total", "counter",
         "Reservations released by the sweeper, by reason.");
  for (size_t i = 0; i < release_reasons.size(); ++i)
    if (series.releases[i].get() > 0 || i + 1 < release_reasons.size())
      sample(out, "chargeonce_releases_total", {{"reason", release_reasons[i]}},
             num(series.releases[i].get()));
  render_counter(out, "chargeonce_reactivations_total",
                 "Quiet chats refilled and invited back (limits_refilled).",
                 series.reactivations);
  render_counter(out, "chargeonce_sweeps_total", "Sweep runs completed.",
                 series.sweeps);
  render_counter(out, "chargeonce_persistence_restarts_total",
                 "Persistence actors (one Postgres connection each) restarted "
                 "after they died.",
                 series.persistence_restarts);
  render_counter(out, "chargeonce_storage_errors_total",
                 "Operations Postgres failed: lost connection, timeout or an "
                 "unexpected SQL error (storage_unavailable).",
                 series.storage_errors);
  render_counter(out, "chargeonce_persistence_reconnects_total",
                 "Postgres connections opened again after their first (a "
                 "lost connection, a failover, a standby refused).",
                 series.reconnects);
  {
    int64_t members = 0;
    {
      std::lock_guard<std::mutex> guard{series.unavailable_mtx};
      members = series.unavailable_members;
    }
    family(out, "chargeonce_storage_unavailable", "gauge",
           "Persistence connections that find no writable Postgres now "
           "(0: every one reaches the primary).");
    sample(out, "chargeonce_storage_unavailable", {}, num(members));
  }
  family(out, "chargeonce_storage_unavailable_seconds_total", "counter",
         "Seconds during which at least one persistence connection found no "
         "writable Postgres: time without a primary.");
  sample(out, "chargeonce_storage_unavailable_seconds_total", {},
         detail::format_value(unavailable_seconds()));
  render_gauge(out, "chargeonce_chat_actors", "Chat actors resident in memory.",
               series.chat_actors);
  render_counter(out, "chargeonce_passivations_total",
                 "Idle chat actors passivated.", series.passivations);
}

void render_persistence(std::string& out) {
  family(out, "chargeonce_persistence_batch_size", "histogram",
         "Client operations carried by one Postgres round trip.");
  histogram_samples(out, "chargeonce_persistence_batch_size", batch_bounds,
                    series.batch_sizes, nullptr);
  render_gauge(out, "chargeonce_persistence_queue_depth",
               "Operations waiting in persistence actors for Postgres.",
               series.queue_depth);
  render_gauge(out, "chargeonce_persistence_queue_max",
               "persistence-queue-max: operations one persistence actor lets "
               "wait before it answers overloaded.",
               series.queue_max);
  if (!series.active_reservations_known.load(relaxed))
    return;
  render_gauge(out, "chargeonce_active_reservations",
               "Active reservations in Postgres (all servers).",
               series.active_reservations);
  family(out, "chargeonce_active_reservations_by_plan", "gauge",
         "Active reservations in Postgres (all servers), by the chat's "
         "plan now.");
  sample(out, "chargeonce_active_reservations_by_plan", {{"plan", "free"}},
         num(series.active_reservations_free.get()));
  sample(out, "chargeonce_active_reservations_by_plan", {{"plan", "premium"}},
         num(series.active_reservations_premium.get()));
}

} // namespace

std::string render() {
  std::string out;
  out.reserve(std::size_t{32} * 1024);
  render_operations(out);
  render_background(out);
  render_persistence(out);
  render_process(out, read_process());
  family(out, "chargeonce_build_info", "gauge",
         "Always 1; the version of the running chargeonce-server.");
  sample(out, "chargeonce_build_info", {{"version", CHARGEONCE_VERSION}}, "1");
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
