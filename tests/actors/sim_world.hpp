// SPDX-License-Identifier: Apache-2.0
// An in-memory database with the semantics of the Postgres schema and of
// persistence/store.cpp, for the seeded simulation. Every rule here mirrors
// one in store.cpp; the real one is tested against Postgres elsewhere.
#pragma once

#include "protocol/events.hpp"
#include "protocol/types.hpp"

#include <caf/expected.hpp>

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace chargeonce::test {

struct sim_chat {
  pockets available;
  caf::optional<caf::timestamp> premium_until;
  bool blocked = false;
  bool banned = false;
};

struct sim_world {
  // -- the database --
  std::map<chat_id, sim_chat> chats;
  std::map<reservation_id, reservation> reservations; ///< active only
  std::map<reservation_id, receipt> ledger;
  std::map<reservation_id, chat_id> released;
  std::map<std::string, top_up_receipt> purchases;
  reservation_id next_id = 0;
  caf::timespan sweep_timeout = std::chrono::seconds(30);
  caf::timespan lease_duration = std::chrono::seconds(5);

  // -- faults, chosen by the seeded generator --
  std::mt19937_64 rng;
  int fault_percent = 0; ///< per operation: error before or after the write
  bool outage = false;   ///< every operation fails before writing
  uint64_t faults_before = 0;
  uint64_t faults_after = 0;

  // -- operations (same answers as store.cpp) --
  caf::expected<chat_status> create(const chat_spec& spec, caf::timestamp now);
  caf::expected<reservation> reserve(chat_id chat, kind k,
                                     const std::string& request_id,
                                     caf::timestamp now);
  caf::expected<reservation> start(chat_id chat, reservation_id id);
  caf::expected<reservation> heartbeat(chat_id chat, reservation_id id,
                                       caf::timestamp now);
  caf::expected<receipt> commit(chat_id chat, reservation_id id,
                                caf::timestamp now);
  caf::expected<reservation> fail(chat_id chat, reservation_id id);
  caf::expected<reservation> cancel(chat_id chat);
  caf::expected<chat_status> status(chat_id chat, caf::timestamp now);
  caf::expected<reservation_released> release(chat_id chat, reservation_id id,
                                              caf::timestamp now);
  std::vector<sweep_candidate> sweep(const sweep_cursor& after, uint32_t limit,
                                     caf::timestamp now);
  caf::expected<top_up_receipt> top_up(chat_id chat, int64_t credits,
                                       const std::string& payment_id,
                                       caf::timestamp now);

  /// Past its deadline: older than sweep_timeout, or its lease lapsed.
  bool due(const reservation& r, caf::timestamp now) const;

private:
  caf::error explain_missing(chat_id chat, reservation_id id) const;
  caf::optional<reservation> active_of(chat_id chat) const;
};

} // namespace chargeonce::test
