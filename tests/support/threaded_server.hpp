// SPDX-License-Identifier: Apache-2.0
// The server's actors (supervisor, pool, registry, event bus) on real
// threads over a real Postgres, driven from test threads.
#pragma once

#include "actors/facade_actor.hpp"
#include "actors/supervisor_actor.hpp"
#include "persistence/store.hpp"
#include "protocol/config.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <chrono>

namespace chargeonce::test {

struct threaded_config : caf::actor_system_config {
  threaded_config() {
    register_protocol(*this);
    load<caf::io::middleman>(); // for tests that publish the API
    set("scheduler.max-threads", 2);
    deserialize_on_middleman_thread(*this); // as chargeonce-server does
  }
};

struct threaded_server {
  threaded_config cfg;
  caf::actor_system sys{cfg};
  supervisor_actor root;
  api_actor api;   ///< the published API, as callers in the process get it
  core_actor core; ///< the registry, over which a server builds its facades

  explicit threaded_server(const persistence::store_options& opts,
                           supervisor_options sup = {}) {
    root = sys.spawn(make_supervisor, make_persistence_factory(sys, opts), sup);
    caf::scoped_actor self{sys};
    self->request(root, std::chrono::seconds(10), atom::api_v)
      .receive([this](api_actor& x) { api = std::move(x); },
               [](caf::error&) {});
    self->request(root, std::chrono::seconds(10), atom::core_v)
      .receive([this](core_actor& x) { core = std::move(x); },
               [](caf::error&) {});
  }

  std::vector<caf::actor> facades; ///< published, stopped with the server

  ~threaded_server() {
    for (auto& x : facades)
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  }

  /// One blocking request from the calling thread.
  template <class T, class Handle, class... Ts>
  caf::expected<T> ask_actor(const Handle& dst, Ts... xs) {
    caf::scoped_actor self{sys};
    caf::expected<T> out{caf::sec::none};
    self->request(dst, std::chrono::seconds(60), xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& e) { out = std::move(e); });
    return out;
  }

  template <class T, class... Ts>
  caf::expected<T> ask(Ts... xs) {
    return ask_actor<T>(api, xs...);
  }

  /// Publishes a facade on 127.0.0.1 (0: any free port), as the server
  /// does: all roles by default; the bound port.
  template <class Facade = decltype(make_api_facade)>
  uint16_t publish(uint16_t port = 0, Facade make = make_api_facade) {
    auto facade = sys.spawn(make, core);
    facades.push_back(caf::actor_cast<caf::actor>(facade));
    auto bound = sys.middleman().publish(facade, port, "127.0.0.1", true);
    return bound ? *bound : 0;
  }

  /// Runs one full sweep now; how many reservations it released.
  caf::expected<uint64_t> sweep() {
    return ask_actor<uint64_t>(root, atom::sweep_v);
  }
};

} // namespace chargeonce::test
