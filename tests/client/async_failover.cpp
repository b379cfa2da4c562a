// SPDX-License-Identifier: Apache-2.0
// The client's asynchronous calls against two real servers over TCP and a
// real Postgres: after the home server went away, safe operations are
// answered by the next one; cancel and a reserve without a request_id are
// not retried, as with the blocking calls.
#include "client/client.hpp"
#include "tests/client/async_script.hpp"
#include "tests/client/async_test.hpp"
#include "tests/client/client_test.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::test;
using namespace std::chrono_literals;

TEST_SUITE("client.async.failover") {

  TEST_CASE("failover: safe operations issued asynchronously after the home "
            "server went away are answered by the next server, a reserve "
            "without request_id too (with an id the client made up); cancel "
            "is not retried") {
    persistence::store setup{test::store_options()};
    for (bool batching : {true, false}) {
      CAPTURE(batching);
      auto a = std::make_unique<test::threaded_server>(test::store_options());
      test::threaded_server b{test::store_options()};
      auto servers = test::publish_all({a.get(), &b});
      constexpr int jobs = 8;
      std::vector<chat_id> job_chats;
      std::vector<reservation> reserved;
      chat_id cancel_chat = 0;
      chat_id safe_chat = 0;
      chat_id made_up_chat = 0;
      chat_id status_chat = 0;
      tracker t{64};
      countdown done{jobs + 5};
      std::atomic<int> failures{0};
      surprises odd;
      std::atomic<int> cancel_errors{0};

      {
        client_side side;
        client::client c{side.sys,
                         options_for(servers, client::role::all, batching, 5s)};
        auto make = [&](pockets initial) {
          auto chat = test::chat_homed_at(c, servers, 0);
          REQUIRE(c.create({chat, initial, caf::none, caf::none}));
          return chat;
        };
        for (int i = 0; i < jobs; ++i) {
          job_chats.push_back(make({3, 0, 0}));
          auto r = c.reserve(job_chats.back(), kind::text, "job");
          REQUIRE(r);
          reserved.push_back(*r);
        }
        cancel_chat = make({3, 0, 0});
        REQUIRE(c.reserve(cancel_chat, kind::text, ""));
        safe_chat = make({3, 0, 0});
        made_up_chat = make({3, 0, 0});
        status_chat = make({3, 2, 1});
        REQUIRE(c.status(status_chat)); // connected to A
        a.reset();                      // server A is gone
        auto failed = [&](const std::string& what) {
          ++failures;
          odd.add(what);
          done.arrive();
        };
        // Safe: start -> heartbeat -> commit chains, status, touch, and a
        // reserve with its request_id, all answered by B.
        for (int i = 0; i < jobs; ++i) {
          auto chat = job_chats[i];
          auto id = reserved[i].id;
          auto slot = t.take();
          issue([&] {
            c.start(
              chat, id, t.watch<reservation>(slot, [&, chat, id](auto& s) {
                if (!s || s->status != reservation_status::in_progress)
                  return failed("start: " + summary(s));
                auto slot = t.take();
                issue([&, chat, id, slot] {
                  c.heartbeat(
                    chat, id,
                    t.watch<reservation>(slot, [&, chat, id](auto& h) {
                      if (!h || !h->lease_expires_at)
                        return failed("heartbeat: " + summary(h));
                      auto slot = t.take();
                      issue([&, chat, id, slot] {
                        c.commit(chat, id, t.watch<receipt>(slot, [&](auto& x) {
                          if (!x || x->charged != pockets{1, 0, 0})
                            return failed("commit: " + summary(x));
                          done.arrive();
                        }));
                      });
                    }));
                });
              }));
          });
        }
        auto slot = t.take();
        issue([&] {
          c.status(status_chat, t.watch<chat_status>(slot, [&](auto& x) {
            if (!x || x->chat != status_chat || x->amounts != pockets{3, 2, 1})
              return failed("status: " + summary(x));
            done.arrive();
          }));
        });
        slot = t.take();
        issue([&] {
          c.touch(status_chat, t.watch<chat_status>(slot, [&](auto& x) {
            if (!x || x->chat != status_chat)
              return failed("touch: " + summary(x));
            done.arrive();
          }));
        });
        slot = t.take();
        issue([&] {
          c.reserve(safe_chat, kind::text, "safe",
                    t.watch<reservation>(slot, [&](auto& x) {
                      if (!x || x->request_id != "safe")
                        return failed("reserve: " + summary(x));
                      done.arrive();
                    }));
        });
        // Without a request id: the client's own auto: id makes it safe.
        slot = t.take();
        issue([&] {
          c.reserve(made_up_chat, kind::text, "",
                    t.watch<reservation>(slot, [&](auto& x) {
                      if (!x || x->request_id.rfind("auto:", 0) != 0)
                        return failed("made-up reserve: " + summary(x));
                      done.arrive();
                    }));
        });
        // Unsafe: the connection error comes back, B never sees it.
        slot = t.take();
        issue([&] {
          c.cancel(cancel_chat, t.watch<reservation>(slot, [&](auto& x) {
            if (x || is_service_error(x.error()))
              odd.add("cancel: " + summary(x));
            else
              ++cancel_errors;
            done.arrive();
          }));
        });
        CHECK(done.wait(30s));
      }
      INFO("unexpected answers: " << odd.text());
      CHECK(failures.load() == 0);
      CHECK(cancel_errors.load() == 1);
      check_exactly_once(t, jobs * 3 + 5);
      // Postgres: each job charged once; the cancel never reached B.
      for (auto chat : job_chats) {
        CHECK(setup.status(chat)->amounts == pockets{2, 0, 0});
        CHECK(
          test::sql_int(
            "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
            + std::to_string(chat))
          == 1);
      }
      auto cancelled = setup.status(cancel_chat);
      REQUIRE(cancelled);
      CHECK(cancelled->active);
      auto made_up = setup.status(made_up_chat);
      REQUIRE(made_up);
      REQUIRE(made_up->active);
      CHECK(made_up->active->request_id.rfind("auto:", 0) == 0);
      auto safe = setup.status(safe_chat);
      REQUIRE(safe);
      REQUIRE(safe->active);
      CHECK(safe->active->request_id == "safe");
    }
  }

} // TEST_SUITE
