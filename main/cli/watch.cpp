// SPDX-License-Identifier: Apache-2.0
#include "main/cli/watch.hpp"

#include "protocol/events.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <iostream>
#include <unistd.h>

namespace chargeonce::cli {

namespace {

/// Set when a watched server went away; read after sigwait returns.
std::atomic<bool> server_lost{false};

/// Prints every event as one JSON line as it happens.
caf::behavior event_printer() {
  return {
    [](const queue_notice& x) { print_line(to_json(x)); },
    [](const reservation_released& x) { print_line(to_json(x)); },
    [](const cancel_requested& x) { print_line(to_json(x)); },
    [](const reconcile_needed& x) { print_line(to_json(x)); },
    [](const limits_refilled& x) { print_line(to_json(x)); },
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

int watch(session& s) {
  auto printer = s.sys.spawn(event_printer);
  s.api.on_server_lost([](const client::endpoint&) {
    server_lost = true;
    kill(getpid(), SIGTERM);
  });
  auto subscribed = s.api.subscribe(printer);
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
  return exit_ok;
}

} // namespace chargeonce::cli
