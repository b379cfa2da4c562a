// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/sweep.hpp"

#include "actors/supervisor_actor.hpp"
#include "persistence/store.hpp"
#include "protocol/config.hpp"
#include "protocol/errors.hpp"
#include "tools/bench/processes.hpp"
#include "tools/common/seed.hpp"

#include <caf/all.hpp>
#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <stdexcept>

namespace chargeonce::bench {

namespace {

/// How long the bench waits for one sweep before it calls it hung: a minute
/// plus 100 ms per reservation, far above the 0.25 to 0.5 ms each took on
/// a 2-core machine, quiet and busy.
caf::timespan sweep_wait_max(int64_t reservations) {
  return std::chrono::minutes(1)
         + std::chrono::milliseconds(100) * reservations;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// -- the rows -----------------------------------------------------------------

/// Chats first+1 … first+count, each with an image job started an hour ago
/// by a worker that died (no lease, never heartbeated): past the store's
/// default sweep-timeout (3 min), which the bench's supervisor runs with.
/// The same rows as the sweep tests make.
void insert_stuck(const std::string& dsn, const chat_range& range) {
  pqxx::connection conn{dsn};
  {
    pqxx::work tx{conn};
    tx.exec_params("INSERT INTO chats (chat_id, pockets) SELECT $1::bigint + "
                   "g, '{NULL,NULL,1}' FROM generate_series(1::bigint, "
                   "$2::bigint) AS g",
                   range.first, range.count);
    tx.exec_params("INSERT INTO reservations (chat_id, kind, status, held, "
                   "queue, created_at) SELECT $1::bigint + g, 'image', "
                   "'in_progress', '{NULL,NULL,1}', 'image_generation', now() "
                   "- interval '1 hour' FROM generate_series(1::bigint, "
                   "$2::bigint) AS g",
                   range.first, range.count);
    tx.commit();
  }
  // Both measurements start from fresh statistics, as seeded runs do.
  pqxx::nontransaction tx{conn};
  tx.exec("ANALYZE chats, reservations");
}

/// Of the range: rows remembered as released by the sweep, rows still held.
std::pair<int64_t, int64_t> read_back(const std::string& dsn,
                                      const chat_range& range) {
  pqxx::connection conn{dsn};
  pqxx::nontransaction tx{conn};
  auto r = tx.exec_params1("SELECT (SELECT count(*) FROM released_reservations"
                           "         WHERE reason = 'sweep_timeout'"
                           "           AND chat_id > $1 AND chat_id <= $2),"
                           "       (SELECT count(*) FROM reservations"
                           "         WHERE chat_id > $1 AND chat_id <= $2)",
                           range.first, range.first + range.count);
  return {r[0].as<int64_t>(), r[1].as<int64_t>()};
}

/// Removes what the run made: each release also published an event, which
/// drop_chats leaves alone.
void remove(const std::string& dsn, const chat_range& range) {
  {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    tx.exec_params("DELETE FROM events WHERE chat_id > $1 AND chat_id <= $2",
                   range.first, range.first + range.count);
    tx.commit();
  }
  if (auto err = persistence::drop_chats(dsn, range.first, range.count))
    throw std::runtime_error(error_message(err));
}

// -- the two measurements -----------------------------------------------------

struct sweep_config : caf::actor_system_config {
  sweep_config() { register_protocol(*this); }
};

/// The server's actors on an actor system of their own; one sweep before
/// the rows exist (it connects the pool and releases what others left
/// stuck), then the measured sweep of `range`.
void measure_sweep(const bench_options& o, const chat_range& range,
                   sweep_run& out) {
  sweep_config cfg;
  caf::actor_system sys{cfg};
  supervisor_options sup;
  sup.connections = o.connections;
  // Only the sweeps asked for below: a tick between the rows' insert and
  // the request would start the sweep before the clock.
  sup.sweep_interval = std::chrono::hours(24);
  persistence::store_options store{o.postgres};
  supervisor_actor root =
    sys.spawn(make_supervisor, make_persistence_factory(sys, store), sup);
  caf::scoped_actor self{sys};
  auto sweep = [&](caf::timespan wait) {
    caf::expected<uint64_t> released{caf::sec::none};
    self->request(root, wait, atom::sweep_v)
      .receive([&](uint64_t n) { released = n; },
               [&](caf::error& err) { released = std::move(err); });
    return released;
  };
  try {
    if (auto before = sweep(sweep_wait_max(0)); !before)
      throw std::runtime_error("the sweep before the run failed: "
                               + error_message(before.error()));
    insert_stuck(o.postgres, range);
    reset_peak_rss();
    auto t0 = clock_type::now();
    auto released = sweep(sweep_wait_max(range.count));
    out.sweep_s = seconds_since(t0);
    out.memory = read_memory(0, "bench");
    if (!released)
      throw std::runtime_error("the sweep failed: "
                               + error_message(released.error()));
    out.sweep_released = *released;
  } catch (...) {
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    throw;
  }
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
}

/// One statement, committed on its own, from a connection opened before
/// the clock.
void measure_delete(const bench_options& o, const chat_range& range,
                    sweep_run& out) {
  insert_stuck(o.postgres, range);
  pqxx::connection conn{o.postgres};
  pqxx::nontransaction tx{conn};
  auto t0 = clock_type::now();
  auto rs = tx.exec_params("DELETE FROM reservations WHERE chat_id > $1 AND "
                           "chat_id <= $2 RETURNING id, chat_id",
                           range.first, range.first + range.count);
  out.delete_s = seconds_since(t0);
  out.deleted = rs.size();
}

/// Runs `f` on `range`, then removes the range's rows whatever happened.
template <class F>
void with_range(const std::string& dsn, const chat_range& range, F f) {
  try {
    f();
  } catch (...) {
    try {
      remove(dsn, range); // the original error matters more
    } catch (const std::exception& e) {
      spdlog::error("cannot remove the stuck reservations: {}", e.what());
    }
    throw;
  }
  remove(dsn, range);
}

} // namespace

sweep_run run_sweep(const bench_options& o, const chat_range& swept,
                    const chat_range& deleted) {
  sweep_run out;
  out.reservations = swept.count;
  out.connections = o.connections;
  with_range(o.postgres, swept, [&] {
    measure_sweep(o, swept, out);
    std::tie(out.released_rows, out.left) = read_back(o.postgres, swept);
  });
  with_range(o.postgres, deleted, [&] { measure_delete(o, deleted, out); });
  return out;
}

} // namespace chargeonce::bench
