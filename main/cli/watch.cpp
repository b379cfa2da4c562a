// SPDX-License-Identifier: Apache-2.0
#include "main/cli/watch.hpp"

#include "protocol/events.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <deque>
#include <iostream>
#include <unistd.h>
#include <unordered_set>

namespace chargeonce::cli {

namespace {

/// Set when a watched server went away; read after sigwait returns.
std::atomic<bool> server_lost{false};
/// Set when a server cut the watch off: the last event id it sent.
std::atomic<event_id> cut_off_after{-1};

/// The ids printed lately: every server sends every durable event, and a
/// resumed watch may get one again; each is printed once.
class seen_ids {
public:
  /// True the first time `id` is offered.
  bool first(event_id id) {
    if (!ids_.insert(id).second)
      return false;
    order_.push_back(id);
    if (order_.size() > remembered_max) {
      ids_.erase(order_.front());
      order_.pop_front();
    }
    return true;
  }

private:
  static constexpr size_t remembered_max = 100'000;
  std::unordered_set<event_id> ids_;
  std::deque<event_id> order_;
};

/// Prints every event as one JSON line as it happens, each durable one once.
caf::behavior event_printer(caf::event_based_actor* self) {
  auto seen = std::make_shared<seen_ids>();
  auto once = [seen](const auto& x) {
    if (seen->first(x.id))
      print_line(to_json(x));
  };
  return {
    [](const queue_notice& x) { print_line(to_json(x)); },
    [once](const reservation_released& x) { once(x); },
    [once](const cancel_requested& x) { once(x); },
    [once](const reconcile_needed& x) { once(x); },
    [once](const limits_refilled& x) { once(x); },
    [once](const credits_expired& x) { once(x); },
    [once](const credits_expiring& x) { once(x); },
    [once](const balance_low& x) { once(x); },
    [self](const subscription_ended& x) {
      print_line(to_json(x));
      cut_off_after = x.last_id;
      self->quit();
      kill(getpid(), SIGTERM);
    },
  };
}

} // namespace

sigset_t watch_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

int watch(session& s, caf::optional<event_id> after) {
  auto printer = s.sys.spawn(event_printer);
  s.api.on_server_lost([](const client::endpoint&) {
    server_lost = true;
    kill(getpid(), SIGTERM);
  });
  auto subscribed =
    after ? s.api.subscribe(printer, *after) : s.api.subscribe(printer);
  if (!subscribed) {
    caf::anon_send_exit(printer, caf::exit_reason::user_shutdown);
    return report_failure(s, subscribed.error());
  }
  std::cerr << "chargeonce-cli: watching " << s.label << std::endl;
  auto signals = watch_signals();
  int sig = 0;
  sigwait(&signals, &sig);
  caf::anon_send_exit(printer, caf::exit_reason::user_shutdown);
  if (server_lost)
    return report_connection(s.label + " went away");
  if (auto last = cut_off_after.load(); last >= 0)
    return report_connection("the server cut this watch off (it fell behind); "
                             "resume with --after="
                             + std::to_string(last));
  return exit_ok;
}

} // namespace chargeonce::cli
