// SPDX-License-Identifier: Apache-2.0
// What the asynchronous-call suites share: a client with an actor system of
// its own, and the bookkeeping that proves each continuation ran exactly
// once, never inside the call that issued it and never on the test thread.
#pragma once

#include "client/client.hpp"
#include "protocol/errors.hpp"
#include "tests/client/client_test.hpp"

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chargeonce::test {

/// A client's own actor system. Once destroyed, no thread is left that
/// could still run a continuation: counts taken after that are final.
struct client_side {
  client_config cfg;
  caf::actor_system sys{cfg};
};

/// A client of `servers` in role `r`: 20 s for connects and requests unless
/// the test needs a failure sooner.
inline client::options
options_for(std::vector<client::endpoint> servers, client::role r,
            bool batching, caf::timespan timeout = std::chrono::seconds(20)) {
  client::options opts;
  opts.servers = std::move(servers);
  opts.facade = r;
  opts.batching = batching;
  opts.timeout = timeout;
  return opts;
}

/// A client of the one server on 127.0.0.1:`port`.
inline client::options
options_for(uint16_t port, client::role r, bool batching,
            caf::timespan timeout = std::chrono::seconds(20)) {
  return options_for({{"127.0.0.1", port}}, r, batching, timeout);
}

/// True for the server's answers (busy, not_found, …), as opposed to CAF's
/// connection errors.
inline bool is_service_error(const caf::error& err) {
  return err.category() == caf::atom(error_category_name);
}

// -- where and how often continuations run ------------------------------------

/// How many client calls this thread is inside of right now. A continuation
/// that finds it above zero runs inside the call that issued it (a thread
/// inside a call is busy with that call: nothing else can run on it).
inline thread_local int calls_in_progress = 0;

/// Makes one client call, marked as in progress on this thread.
template <class F>
void issue(F&& f) {
  ++calls_in_progress;
  f();
  --calls_in_progress;
}

/// Counts, per call, how often its continuation ran, and where.
struct tracker {
  explicit tracker(size_t capacity) : answered(capacity) {}

  std::thread::id caller = std::this_thread::get_id(); ///< the test thread
  std::vector<std::atomic<int>> answered;              ///< by slot
  std::atomic<size_t> taken{0};
  std::atomic<int> inside{0};    ///< ran inside the issuing call
  std::atomic<int> on_caller{0}; ///< ran on the test thread
  std::atomic<int> overflow{0};  ///< more calls than slots (a test bug)

  /// A slot for one call, taken before the call is issued.
  size_t take() {
    auto slot = taken++;
    if (slot >= answered.size()) {
      ++overflow;
      return answered.size() - 1;
    }
    return slot;
  }

  /// The continuation for the call of `slot`: records, then runs `f`.
  template <class T, class F>
  client::continuation<T> watch(size_t slot, F f) {
    return [this, slot, f](caf::expected<T> x) mutable {
      if (calls_in_progress > 0)
        ++inside;
      if (std::this_thread::get_id() == caller)
        ++on_caller;
      ++answered[slot];
      f(x);
    };
  }

  size_t calls() const { return std::min(taken.load(), answered.size()); }

  int missing() const {
    int n = 0;
    for (size_t i = 0; i < calls(); ++i)
      n += answered[i] == 0 ? 1 : 0;
    return n;
  }

  int repeated() const {
    int n = 0;
    for (size_t i = 0; i < calls(); ++i)
      n += answered[i] > 1 ? 1 : 0;
    return n;
  }
};

/// Checks what every test checks about its continuations, once no thread
/// can run one any more (the client's actor system is gone): each ran
/// exactly once, never inside the call that issued it and (unless
/// `caller_checked` is false) never on the test thread.
inline void check_exactly_once(const tracker& t, size_t calls,
                               bool caller_checked = true) {
  CHECK(t.overflow.load() == 0);
  CHECK(t.calls() == calls);
  CHECK(t.missing() == 0);
  CHECK(t.repeated() == 0);
  CHECK(t.inside.load() == 0);
  if (caller_checked)
    CHECK(t.on_caller.load() == 0);
}

/// Waits (with a timeout) until `arrive` was called `n` times.
class countdown {
public:
  explicit countdown(int n) : left_(n) {}

  void arrive() {
    std::lock_guard<std::mutex> guard{mtx_};
    if (--left_ <= 0)
      cv_.notify_all();
  }

  bool wait(std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> guard{mtx_};
    return cv_.wait_for(guard, timeout, [this] { return left_ <= 0; });
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  int left_;
};

/// Keeps the first few unexpected answers for the report.
struct surprises {
  std::mutex mtx;
  std::vector<std::string> seen;

  void add(std::string what) {
    std::lock_guard<std::mutex> guard{mtx};
    if (seen.size() < 8)
      seen.push_back(std::move(what));
  }

  std::string text() {
    std::lock_guard<std::mutex> guard{mtx};
    std::string out;
    for (auto& x : seen)
      out += x + "; ";
    return out;
  }
};

/// What the client's asynchronous calls are answered with after it is
/// destroyed: the server's answer or request_receiver_down, nothing else.
struct answer_tally {
  std::atomic<int> real{0};          ///< a value or a service error
  std::atomic<int> receiver_down{0}; ///< the client went away first
  std::atomic<int> other{0};
  surprises odd;

  template <class T>
  void add(const caf::expected<T>& x) {
    if (x || is_service_error(x.error()))
      ++real;
    else if (x.error() == caf::sec::request_receiver_down)
      ++receiver_down;
    else {
      ++other;
      odd.add(error_name(x.error()));
    }
  }
};

} // namespace chargeonce::test
