// SPDX-License-Identifier: Apache-2.0
// How chargeonce-chaos repeats its own SQL through a formation whose primary
// may move: which errors it repeats, that a repeat is the same keyed
// statement, and that it gives up at its bound. On a simulated clock: no
// Postgres, nothing sleeps.
#include "tools/chaos/sql_retry.hpp"

#include "protocol/errors.hpp"
#include "protocol/types.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::chaos;

namespace {

using clock_type = retry_schedule::clock;

// What persistence passes on (the context of ec::storage_unavailable): its
// own prefix and the text of libpq's or the server's message.
const std::string refused =
  "dropping chats: connection to server at \"127.0.0.1\", port 15431 failed: "
  "Connection refused\n\tIs the server running on that host and accepting "
  "TCP/IP connections?";
const std::string closed =
  "forging a charge: server closed the connection unexpectedly\n\tThis "
  "probably means the server terminated abnormally\n\tbefore or while "
  "processing the request.";
const std::string terminated =
  "reading the audit snapshot: FATAL:  terminating connection due to "
  "administrator command";
const std::string shutting_down =
  "migration failed: FATAL:  the database system is shutting down";
const std::string read_only =
  "forging a charge: ERROR:  cannot execute INSERT in a read-only "
  "transaction";
const std::string standby_refused =
  "dropping chats: connection to server at \"127.0.0.1\", port 15432 failed: "
  "session is read-only";
const std::string sync_wait_cancelled =
  "forging a charge: WARNING:  canceling the wait for synchronous "
  "replication and terminating connection due to administrator command\n"
  "DETAIL:  The transaction has already committed locally, but might not "
  "have been replicated to the standby.";
// The same wait cut short by a cancel rather than a termination: only the
// text about the wait says so.
const std::string sync_wait_cancelled_by_request =
  "forging a charge: WARNING:  canceling wait for synchronous replication "
  "due to user request\nDETAIL:  The transaction has already committed "
  "locally, but might not have been replicated to the standby.";
const std::string duplicate_key =
  "forging a charge: ERROR:  duplicate key value violates unique constraint "
  "\"ledger_reservation_id_key\"\nDETAIL:  Key "
  "(reservation_id)=(9000000000042) already exists.";
const std::string syntax_error =
  "dropping chats: ERROR:  syntax error at or near \"DELET\"";
const std::string statement_timeout =
  "reading the audit snapshot: ERROR:  canceling statement due to statement "
  "timeout";

caf::error storage(const std::string& text) {
  return caf::make_error(ec::storage_unavailable, text);
}

/// A retry_schedule on a clock that only the pauses advance.
struct simulated_clock {
  clock_type::time_point t;
  std::vector<clock_type::duration> pauses;

  retry_schedule
  schedule(clock_type::duration retry_max = primary_moved_retry_max) {
    retry_schedule s;
    s.retry_max = retry_max;
    s.now = [this] {
      return t;
    };
    s.sleep = [this](clock_type::duration d) {
      pauses.push_back(d);
      t += d;
    };
    return s;
  }
};

/// A forged charge keyed by its reservation id, answering from a script
/// of errors (then success), each attempt's key noted.
struct keyed_write {
  explicit keyed_write(std::deque<caf::error> errors)
      : answers(std::move(errors)) {}

  std::deque<caf::error> answers;
  std::vector<reservation_id> keys;

  caf::error operator()(reservation_id id) {
    keys.push_back(id);
    if (answers.empty())
      return caf::error{};
    auto next = answers.front();
    answers.pop_front();
    return next;
  }
};

constexpr reservation_id forged_id = 9'000'000'000'042;

} // namespace

TEST_SUITE("chaos.sql_retry") {

  TEST_CASE("a lost or refused connection, a server going down, a "
            "read-only transaction and a cancelled wait for synchronous "
            "replication say the primary moved") {
    for (const auto& text : {refused, closed, terminated, shutting_down,
                             read_only, standby_refused, sync_wait_cancelled,
                             sync_wait_cancelled_by_request}) {
      CAPTURE(text);
      CHECK(primary_moved(storage(text)));
      CHECK_FALSE(key_taken(storage(text)));
    }
  }

  TEST_CASE("a refusal a working primary gives does not say the primary "
            "moved") {
    for (const auto& text : {duplicate_key, syntax_error, statement_timeout}) {
      CAPTURE(text);
      CHECK_FALSE(primary_moved(storage(text)));
    }
    // Only storage_unavailable carries the server's message.
    CHECK_FALSE(primary_moved(caf::make_error(ec::internal, refused)));
    CHECK_FALSE(primary_moved(caf::error{}));
  }

  TEST_CASE("a unique violation says the key is taken") {
    CHECK(key_taken(storage(duplicate_key)));
    CHECK_FALSE(key_taken(storage(syntax_error)));
    CHECK_FALSE(key_taken(caf::make_error(ec::internal, duplicate_key)));
  }

  TEST_CASE("a keyed write that meets a moving primary runs again with the "
            "same key until it succeeds") {
    simulated_clock sim;
    keyed_write forge{{storage(refused), storage(read_only),
                       storage(sync_wait_cancelled), storage(terminated)}};
    auto err = retried_while_primary_moves(
      "forging a charge", [&] { return forge(forged_id); }, sim.schedule());
    CHECK_FALSE(err);
    CHECK(forge.keys == std::vector<reservation_id>(5, forged_id));
    CHECK(sim.pauses
          == std::vector<clock_type::duration>(4, primary_moved_pause));
  }

  TEST_CASE("a repeat that meets the key its lost attempt wrote is that "
            "attempt's success") {
    simulated_clock sim;
    keyed_write forge{{storage(closed), storage(duplicate_key)}};
    auto err = retried_while_primary_moves(
      "forging a charge", [&] { return forge(forged_id); }, sim.schedule());
    CHECK_FALSE(err);
    CHECK(forge.keys == std::vector<reservation_id>(2, forged_id));
  }

  TEST_CASE("a unique violation on the first attempt is a refusal, returned "
            "at once") {
    simulated_clock sim;
    keyed_write forge{{storage(duplicate_key)}};
    auto err = retried_while_primary_moves(
      "forging a charge", [&] { return forge(forged_id); }, sim.schedule());
    CHECK(err == ec::storage_unavailable);
    CHECK(error_message(err) == duplicate_key);
    CHECK(forge.keys.size() == 1);
    CHECK(sim.pauses.empty());
  }

  TEST_CASE("an error that is not the primary moving is returned at once, "
            "also after repeats") {
    for (const auto& text : {syntax_error, statement_timeout}) {
      CAPTURE(text);
      simulated_clock sim;
      keyed_write once{{storage(text)}};
      auto err = retried_while_primary_moves(
        "clearing old chaos chats", [&] { return once(forged_id); },
        sim.schedule());
      CHECK(error_message(err) == text);
      CHECK(once.keys.size() == 1);
      CHECK(sim.pauses.empty());
      keyed_write after{{storage(read_only), storage(text)}};
      err = retried_while_primary_moves(
        "clearing old chaos chats", [&] { return after(forged_id); },
        sim.schedule());
      CHECK(error_message(err) == text);
      CHECK(after.keys.size() == 2);
    }
  }

  TEST_CASE("a statement that returns a value is repeated likewise, and a "
            "unique violation is no success for it") {
    simulated_clock sim;
    std::deque<caf::error> answers{storage(read_only), storage(closed)};
    int calls = 0;
    auto migrate = [&]() -> caf::expected<std::vector<std::string>> {
      ++calls;
      if (answers.empty())
        return std::vector<std::string>{"001_chats"};
      auto next = answers.front();
      answers.pop_front();
      return next;
    };
    auto done =
      retried_while_primary_moves("migrating", migrate, sim.schedule());
    REQUIRE(done);
    CHECK(*done == std::vector<std::string>{"001_chats"});
    CHECK(calls == 3);
    answers = {storage(closed), storage(duplicate_key)};
    calls = 0;
    done = retried_while_primary_moves("migrating", migrate, sim.schedule());
    REQUIRE_FALSE(done);
    CHECK(error_message(done.error()) == duplicate_key);
    CHECK(calls == 2);
  }

  TEST_CASE("it gives up at the first attempt past its bound and returns "
            "the last error") {
    simulated_clock sim;
    int attempts = 0;
    auto down = [&] {
      ++attempts;
      return storage(refused);
    };
    // Attempts at 0, 0.5, ... 2.0 s are within the bound of 2 s; the one
    // at 2.5 s is past it and the last.
    auto err = retried_while_primary_moves(
      "forging a charge", down, sim.schedule(std::chrono::seconds(2)));
    CHECK(error_message(err) == refused);
    CHECK(attempts == 6);
    CHECK(sim.pauses
          == std::vector<clock_type::duration>(5, primary_moved_pause));
  }

  TEST_CASE("the bound without a primary is at least ten times a failover's "
            "on a quiet machine (about 10 s)") {
    retry_schedule defaults;
    CHECK(defaults.retry_max == primary_moved_retry_max);
    CHECK(defaults.pause == primary_moved_pause);
    CHECK(primary_moved_retry_max >= 10 * std::chrono::seconds(10));
  }
}
