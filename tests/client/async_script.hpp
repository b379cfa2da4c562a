// SPDX-License-Identifier: Apache-2.0
// One script of every hot-path operation in every state of a chat, run
// through the blocking calls and through the asynchronous ones: the answers
// must be the same line by line.
#pragma once

#include "client/client.hpp"
#include "tests/client/async_gate.hpp"
#include "tests/client/async_test.hpp"

#include <caf/expected.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace chargeonce::test {

/// A chat's pockets as "messages/images/balance".
std::string str(const pockets& x);

/// An answer in one line, without ids or times.
std::string summary(const caf::error& err);
std::string summary(const caf::expected<reservation>& x);
std::string summary(const caf::expected<receipt>& x);
std::string summary(const caf::expected<chat_status>& x);

/// The blocking calls, under the names the script uses.
struct blocking_calls {
  client::client& c;

  caf::expected<chat_status> touch(chat_id chat) { return c.touch(chat); }
  caf::expected<chat_status> status(chat_id chat) { return c.status(chat); }
  caf::expected<reservation> cancel(chat_id chat) { return c.cancel(chat); }
  caf::expected<reservation> reserve(chat_id chat, kind k,
                                     const std::string& request_id) {
    return c.reserve(chat, k, request_id);
  }
  caf::expected<reservation> start(chat_id chat, reservation_id id) {
    return c.start(chat, id);
  }
  caf::expected<reservation> heartbeat(chat_id chat, reservation_id id) {
    return c.heartbeat(chat, id);
  }
  caf::expected<receipt> commit(chat_id chat, reservation_id id) {
    return c.commit(chat, id);
  }
  caf::expected<reservation> fail(chat_id chat, reservation_id id) {
    return c.fail(chat, id);
  }
};

/// The asynchronous calls, each waited for by the test thread.
struct async_calls {
  client::client& c;
  tracker& t;

  template <class T, class Issue>
  caf::expected<T> wait(Issue call) {
    auto answer = std::make_shared<std::promise<caf::expected<T>>>();
    auto result = answer->get_future();
    auto slot = t.take();
    issue([&] {
      call(t.watch<T>(slot, [answer](caf::expected<T>& x) {
        try {
          answer->set_value(std::move(x));
        } catch (const std::future_error&) {
          // A second run: the tracker counts it.
        }
      }));
    });
    if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
      return caf::make_error(caf::sec::request_timeout,
                             "test: the continuation never ran");
    return result.get();
  }

  caf::expected<chat_status> touch(chat_id chat) {
    return wait<chat_status>([&](auto k) { c.touch(chat, std::move(k)); });
  }
  caf::expected<chat_status> status(chat_id chat) {
    return wait<chat_status>([&](auto k) { c.status(chat, std::move(k)); });
  }
  caf::expected<reservation> cancel(chat_id chat) {
    return wait<reservation>([&](auto k) { c.cancel(chat, std::move(k)); });
  }
  caf::expected<reservation> reserve(chat_id chat, kind x,
                                     const std::string& request_id) {
    return wait<reservation>(
      [&](auto k) { c.reserve(chat, x, request_id, std::move(k)); });
  }
  caf::expected<reservation> start(chat_id chat, reservation_id id) {
    return wait<reservation>([&](auto k) { c.start(chat, id, std::move(k)); });
  }
  caf::expected<reservation> heartbeat(chat_id chat, reservation_id id) {
    return wait<reservation>(
      [&](auto k) { c.heartbeat(chat, id, std::move(k)); });
  }
  caf::expected<receipt> commit(chat_id chat, reservation_id id) {
    return wait<receipt>([&](auto k) { c.commit(chat, id, std::move(k)); });
  }
  caf::expected<reservation> fail(chat_id chat, reservation_id id) {
    return wait<reservation>([&](auto k) { c.fail(chat, id, std::move(k)); });
  }
};

/// Every hot-path operation in every state a chat with one daily message
/// goes through, with the service error each state gives; one line per
/// answer, without ids or times. `chat` is fresh with pockets {1, 0, 0};
/// `unknown` was never created.
template <class Calls>
std::vector<std::string> script(Calls& api, chat_id chat, chat_id unknown) {
  const reservation_id nowhere = 4'000'000'000'000'000'000;
  auto id_of = [&](const caf::expected<reservation>& x) {
    return x ? x->id : nowhere;
  };
  std::vector<std::string> out;
  auto add = [&](const char* what, std::string answer) {
    out.push_back(std::string{what} + ": " + answer);
  };
  add("status", summary(api.status(chat)));
  add("start unknown", summary(api.start(chat, nowhere)));
  add("heartbeat unknown", summary(api.heartbeat(chat, nowhere)));
  add("commit unknown", summary(api.commit(chat, nowhere)));
  add("fail unknown", summary(api.fail(chat, nowhere)));
  add("cancel nothing", summary(api.cancel(chat)));
  auto first = api.reserve(chat, kind::text, "a");
  add("reserve a", summary(first));
  add("reserve b", summary(api.reserve(chat, kind::text, "b")));
  auto again = api.reserve(chat, kind::text, "a");
  add("reserve a again",
      summary(again)
        + (again && first && again->id == first->id ? " (same)" : " (other)"));
  add("status queued", summary(api.status(chat)));
  add("heartbeat queued", summary(api.heartbeat(chat, id_of(first))));
  add("commit queued", summary(api.commit(chat, id_of(first))));
  add("cancel queued", summary(api.cancel(chat)));
  add("start cancelled", summary(api.start(chat, id_of(first))));
  add("reserve image", summary(api.reserve(chat, kind::image, "c")));
  auto second = api.reserve(chat, kind::text, "d");
  add("reserve d", summary(second));
  add("start", summary(api.start(chat, id_of(second))));
  add("start again", summary(api.start(chat, id_of(second))));
  add("cancel started", summary(api.cancel(chat)));
  add("heartbeat", summary(api.heartbeat(chat, id_of(second))));
  auto paid = api.commit(chat, id_of(second));
  add("commit", summary(paid));
  auto repaid = api.commit(chat, id_of(second));
  add("commit again",
      summary(repaid)
        + (paid && repaid && paid->committed_at == repaid->committed_at
             ? " (same)"
             : " (other)"));
  add("fail committed", summary(api.fail(chat, id_of(second))));
  add("reserve empty", summary(api.reserve(chat, kind::text, "e")));
  add("reserve without request_id", summary(api.reserve(chat, kind::text, "")));
  add("status after", summary(api.status(chat)));
  add("status unknown chat", summary(api.status(unknown)));
  add("start unknown chat", summary(api.start(unknown, nowhere)));
  add("cancel unknown chat", summary(api.cancel(unknown)));
  add("touch", summary(api.touch(chat)));
  return out;
}

/// The script through a blocking client (batching, all roles): what every
/// asynchronous variant must answer.
std::vector<std::string> blocking_script(gate_fixture& f);

/// Runs the script asynchronously through `opts` and compares it line by
/// line with `want`.
void check_async_script(gate_fixture& f, const client::options& opts,
                        const std::vector<std::string>& want);

} // namespace chargeonce::test
