// SPDX-License-Identifier: Apache-2.0
// The client's asynchronous calls against real servers over TCP and a real
// Postgres: closed loops driven only by continuations are charged exactly
// once and share batches with blocking calls; a continuation runs exactly
// once, never inside the call that issued it and never on the caller's
// thread; the answers and the failover are those of the blocking calls;
// destroying the client answers what is still pending.
#include "client/client.hpp"
#include "protocol/errors.hpp"
#include "tests/support/threaded_server.hpp"
#include "tests/client/client_test.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <set>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

/// A client's own actor system. Once destroyed, no thread is left that
/// could still run a continuation: counts taken after that are final.
struct client_side {
  test::client_config cfg;
  caf::actor_system sys{cfg};
};

client::options options_for(std::vector<client::endpoint> servers,
                            client::role r, bool batching,
                            caf::timespan timeout = 20s) {
  client::options opts;
  opts.servers = std::move(servers);
  opts.facade = r;
  opts.batching = batching;
  opts.timeout = timeout;
  return opts;
}

client::options options_for(uint16_t port, client::role r, bool batching,
                            caf::timespan timeout = 20s) {
  return options_for({{"127.0.0.1", port}}, r, batching, timeout);
}

bool is_service_error(const caf::error& err) {
  return err.category() == caf::atom(error_category_name);
}

// -- where and how often continuations run ------------------------------------

/// How many client calls this thread is inside of right now. A continuation
/// that finds it above zero runs inside the call that issued it (a thread
/// inside a call is busy with that call: nothing else can run on it).
thread_local int calls_in_progress = 0;

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
void check_exactly_once(const tracker& t, size_t calls,
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

// -- a facade that can hold its answers ---------------------------------------

/// Every role's operations and batches, relayed to the server's real
/// facade; `close` holds what arrives from then on (the test decides when it
/// goes on), `open` relays what was held and everything after.
using gate_actor =
  api_facade_actor::extend<caf::replies_to<caf::close_atom>::with<bool>,
                           caf::reacts_to<caf::open_atom>>;

/// What the gate saw, for the test thread.
struct gate_log {
  std::mutex mtx;
  std::condition_variable cv;
  size_t operations = 0;                     ///< received (batched or not)
  std::vector<std::vector<chat_id>> batches; ///< the chats of each batch

  void arrived(size_t n, std::vector<chat_id> batch, bool is_batch) {
    std::lock_guard<std::mutex> guard{mtx};
    operations += n;
    if (is_batch)
      batches.push_back(std::move(batch));
    cv.notify_all();
  }

  /// Waits until at least `n` operations arrived.
  bool wait_for(size_t n, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, timeout, [&] { return operations >= n; });
  }

  size_t received() {
    std::lock_guard<std::mutex> guard{mtx};
    return operations;
  }
};

struct gate_state {
  bool hold = false;
  std::vector<std::function<void()>> held;
};

using gate_pointer = gate_actor::stateful_pointer<gate_state>;

/// Relays one request to `inner` now, or later if the gate is closed.
template <class T, class... Ts>
caf::result<T> pass(gate_pointer self, const api_facade_actor& inner,
                    gate_log& log, size_t n, std::vector<chat_id> chats,
                    bool is_batch, Ts... xs) {
  auto rp = self->template make_response_promise<T>();
  auto go = [self, inner, rp, xs...]() mutable {
    self->request(inner, caf::duration{caf::infinite}, xs...)
      .then([rp](T& x) mutable { rp.deliver(std::move(x)); },
            [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  };
  if (self->state.hold)
    self->state.held.emplace_back(std::move(go));
  else
    go();
  log.arrived(n, std::move(chats), is_batch);
  return rp;
}

gate_actor::behavior_type make_gate(gate_pointer self, api_facade_actor inner,
                                    std::shared_ptr<gate_log> log) {
  return {
    [self, inner, log](atom::batch a, std::vector<operation> ops) {
      std::vector<chat_id> chats;
      for (auto& x : ops)
        chats.push_back(x.chat);
      auto n = ops.size();
      return pass<std::vector<outcome>>(self, inner, *log, n, std::move(chats),
                                        true, a, std::move(ops));
    },
    [self, inner, log](atom::create a, const chat_spec& spec) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, spec);
    },
    [self, inner, log](atom::reserve a, chat_id chat, kind k,
                       const std::string& request_id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, k,
                               request_id);
    },
    [self, inner, log](atom::start a, chat_id chat, reservation_id id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id);
    },
    [self, inner, log](atom::heartbeat a, chat_id chat, reservation_id id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id);
    },
    [self, inner, log](atom::commit a, chat_id chat, reservation_id id) {
      return pass<receipt>(self, inner, *log, 1, {}, false, a, chat, id);
    },
    [self, inner, log](atom::fail a, chat_id chat, reservation_id id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id);
    },
    [self, inner, log](atom::cancel a, chat_id chat) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat);
    },
    [self, inner, log](atom::status a, chat_id chat) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat);
    },
    [self, inner, log](atom::touch a, chat_id chat) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat);
    },
    [self, inner, log](atom::top_up a, chat_id chat, int64_t credits,
                       const std::string& payment_id) {
      return pass<top_up_receipt>(self, inner, *log, 1, {}, false, a, chat,
                                  credits, payment_id);
    },
    [self, inner, log](atom::premium a, chat_id chat, caf::timestamp until) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat, until);
    },
    [self, inner, log](atom::flags a, chat_id chat, const flags_update& x) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat, x);
    },
    [self, inner, log](atom::subscribe a, caf::actor who) {
      return pass<bool>(self, inner, *log, 0, {}, false, a, std::move(who));
    },
    [self](caf::close_atom) {
      self->state.hold = true;
      return true;
    },
    [self](caf::open_atom) {
      self->state.hold = false;
      auto held = std::move(self->state.held);
      self->state.held.clear();
      for (auto& f : held)
        f();
    },
  };
}

/// A port on 127.0.0.1 nobody listens on: connecting fails at once.
uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// A port whose connections the kernel accepts (into the backlog) and that
/// never says a word: a connect waits for CAF's handshake until it times
/// out.
struct mute_listener {
  int fd = -1;
  uint16_t port = 0;

  mute_listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd, 128) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port = ntohs(addr.sin_port);
  }

  ~mute_listener() { ::close(fd); }

  mute_listener(const mute_listener&) = delete;
  mute_listener& operator=(const mute_listener&) = delete;
};

struct fixture {
  test::threaded_server server{test::store_options()};
  persistence::store setup{test::store_options()};
  uint16_t gateway_port = server.publish(0, make_gateway);
  uint16_t worker_port = server.publish(0, make_worker);
  std::shared_ptr<gate_log> log = std::make_shared<gate_log>();
  gate_actor gate; ///< set by publish_gate
  uint16_t gate_port = publish_gate();

  uint16_t publish_gate() {
    auto inner = server.sys.spawn(make_api_facade, server.api);
    gate = server.sys.spawn(make_gate, inner, log);
    server.facades.push_back(caf::actor_cast<caf::actor>(inner));
    server.facades.push_back(caf::actor_cast<caf::actor>(gate));
    auto bound = server.sys.middleman().publish(gate, 0, "127.0.0.1", true);
    return bound ? *bound : 0;
  }

  /// From now on, the gate holds what it receives.
  void close_gate() {
    auto done = server.ask_actor<bool>(gate, caf::close_atom_v);
    REQUIRE(done);
  }

  /// The gate relays what it held and everything after (never blocks).
  void open_gate() { caf::anon_send(gate, caf::open_atom_v); }

  chat_id make_chat(pockets initial) {
    auto chat = test::fresh_chat();
    REQUIRE(setup.create_chat({chat, initial, caf::none}));
    return chat;
  }
};

// -- the same script through the blocking and the asynchronous calls ---------

std::string str(const pockets& x) {
  return std::to_string(x.daily_messages) + "/" + std::to_string(x.daily_images)
         + "/" + std::to_string(x.balance);
}

std::string summary(const caf::error& err) {
  return "error " + error_name(err);
}

std::string summary(const caf::expected<reservation>& x) {
  if (!x)
    return summary(x.error());
  return std::string{"reservation "} + to_string(x->status) + " "
         + to_string(x->kind) + " held " + str(x->held) + " request_id '"
         + x->request_id + "' queue " + x->queue
         + (x->lease_expires_at ? " leased" : " no lease");
}

std::string summary(const caf::expected<receipt>& x) {
  if (!x)
    return summary(x.error());
  return std::string{"receipt "} + to_string(x->kind) + " charged "
         + str(x->charged);
}

std::string summary(const caf::expected<chat_status>& x) {
  if (!x)
    return summary(x.error());
  return "status available " + str(x->available) + " active "
         + (x->active ? to_string(x->active->status) : "none")
         + (x->premium ? " premium" : "") + (x->started ? " started" : "")
         + (x->blocked ? " blocked" : "") + (x->banned ? " banned" : "");
}

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
    if (result.wait_for(30s) != std::future_status::ready)
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
std::vector<std::string> blocking_script(fixture& f) {
  client_side side;
  client::client c{side.sys, options_for(f.gate_port, client::role::all, true)};
  blocking_calls calls{c};
  auto out = script(calls, f.make_chat({1, 0, 0}), test::fresh_chat());
  // Make sure the script says something: its key lines, spelled out.
  REQUIRE(out.size() == 30);
  CHECK(out[0] == "status: status available 1/0/0 active none");
  CHECK(out[1] == "start unknown: error not_found");
  CHECK(out[5] == "cancel nothing: error not_found");
  CHECK(out[7] == "reserve b: error busy");
  CHECK(out[8].find("(same)") != std::string::npos);
  CHECK(out[10] == "heartbeat queued: error invalid_state");
  CHECK(out[11] == "commit queued: error invalid_state");
  CHECK(out[13] == "start cancelled: error not_found");
  CHECK(out[14] == "reserve image: error insufficient_images");
  CHECK(out[18] == "cancel started: error too_late");
  CHECK(out[20] == "commit: receipt text charged 1/0/0");
  CHECK(out[21] == "commit again: receipt text charged 1/0/0 (same)");
  CHECK(out[22] == "fail committed: error invalid_state");
  CHECK(out[23] == "reserve empty: error insufficient_messages");
  CHECK(out[25] == "status after: status available 0/0/0 active none");
  CHECK(out[26] == "status unknown chat: error not_found");
  return out;
}

/// Runs the script asynchronously through `opts` and compares it line by
/// line with `want`.
void check_async_script(fixture& f, const client::options& opts,
                        const std::vector<std::string>& want) {
  tracker t{64};
  std::vector<std::string> got;
  {
    client_side side;
    client::client c{side.sys, opts};
    async_calls calls{c, t};
    got = script(calls, f.make_chat({1, 0, 0}), test::fresh_chat());
  }
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("line " << i);
    CHECK(got[i] == want[i]);
  }
  check_exactly_once(t, want.size());
}

// -- closed loops driven by continuations -------------------------------------

/// `cycles` reserve -> start -> commit cycles of one chat, each call issued
/// by the previous call's continuation.
struct closed_loop {
  client::client& c;
  tracker& t;
  countdown& done;
  std::atomic<int>& failures;
  surprises& odd;
  int cycles;

  void run(chat_id chat, int cycle) {
    if (cycle == cycles) {
      done.arrive();
      return;
    }
    auto failed = [this](const std::string& what) {
      ++failures;
      odd.add(what);
      done.arrive();
    };
    auto slot = t.take();
    issue([&] {
      c.reserve(
        chat, kind::text, "job" + std::to_string(cycle),
        t.watch<reservation>(slot, [=](caf::expected<reservation>& r) {
          if (!r || r->chat != chat || r->held != pockets{1, 0, 0})
            return failed("reserve: " + summary(r));
          auto id = r->id;
          auto held = r->held;
          auto slot = t.take();
          issue([&] {
            c.start(
              chat, id,
              t.watch<reservation>(slot, [=](caf::expected<reservation>& s) {
                if (!s || s->id != id
                    || s->status != reservation_status::in_progress)
                  return failed("start: " + summary(s));
                auto slot = t.take();
                issue([&] {
                  c.commit(
                    chat, id,
                    t.watch<receipt>(slot, [=](caf::expected<receipt>& x) {
                      if (!x || x->reservation != id || x->charged != held)
                        return failed("commit: " + summary(x));
                      run(chat, cycle + 1);
                    }));
                });
              }));
          });
        }));
    });
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

/// 64 asynchronous reserves of one chat (distinct request_ids) from a
/// client of their own: one reservation, 63 busy, each answered once.
/// Returns what the client sent in batches.
std::pair<uint64_t, uint64_t> race_reserves(const client::options& opts,
                                            chat_id chat) {
  tracker t{64};
  countdown done{64};
  std::atomic<int> won{0};
  std::atomic<int> busy{0};
  std::atomic<int> other{0};
  std::pair<uint64_t, uint64_t> sent;
  {
    client_side side;
    client::client c{side.sys, opts};
    for (int i = 0; i < 64; ++i) {
      auto slot = t.take();
      issue([&] {
        c.reserve(
          chat, kind::image, "tap" + std::to_string(i),
          t.watch<reservation>(slot, [&](caf::expected<reservation>& r) {
            if (r)
              ++won;
            else if (r.error() == ec::busy)
              ++busy;
            else
              ++other;
            done.arrive();
          }));
      });
    }
    CHECK(done.wait(30s));
    sent = c.batches_sent();
  }
  CHECK(won.load() == 1);
  CHECK(busy.load() == 63);
  CHECK(other.load() == 0);
  check_exactly_once(t, 64);
  return sent;
}

/// Issues `n` gateway calls on `chats` (status, reserve, touch, cancel in
/// turn), each answer counted in `tally` and `done`.
void issue_gateway_calls(client::client& c, const std::vector<chat_id>& chats,
                         int n, tracker& t, answer_tally& tally,
                         countdown& done) {
  for (int i = 0; i < n; ++i) {
    auto chat = chats[i % chats.size()];
    auto slot = t.take();
    auto record = [&tally, &done](auto& x) {
      tally.add(x);
      done.arrive();
    };
    issue([&] {
      switch (i % 4) {
      case 0:
        c.status(chat, t.watch<chat_status>(slot, record));
        break;
      case 1:
        c.reserve(chat, kind::image, "r" + std::to_string(i),
                  t.watch<reservation>(slot, record));
        break;
      case 2:
        c.touch(chat, t.watch<chat_status>(slot, record));
        break;
      default:
        c.cancel(chat, t.watch<reservation>(slot, record));
      }
    });
  }
}

/// When the gate lets the server's held answers go, against destroying the
/// client.
enum class release { after_answers, after_destroy, racing_destroy };

/// `calls` gateway calls through a client of their own while the gate holds
/// the answers (at least one call reaches it), then the client is
/// destroyed; every call is answered within 30 s.
void destroy_pending(fixture& f, const std::vector<chat_id>& chats, int calls,
                     bool batching, release when, tracker& t,
                     answer_tally& tally) {
  f.close_gate();
  countdown done{calls};
  client_side side;
  auto c = std::make_unique<client::client>(
    side.sys, options_for(f.gate_port, client::role::gateway, batching));
  auto before = f.log->received();
  issue_gateway_calls(*c, chats, calls, t, tally, done);
  REQUIRE(f.log->wait_for(before + 1, 30s));
  switch (when) {
  case release::after_answers:
    c.reset();
    CHECK(done.wait(30s));
    f.open_gate();
    return;
  case release::after_destroy:
    c.reset();
    f.open_gate();
    break;
  case release::racing_destroy: {
    std::atomic<bool> go{false};
    std::thread opener{[&] {
      while (!go)
        std::this_thread::yield();
      f.open_gate();
    }};
    go = true;
    c.reset();
    opener.join();
  }
  }
  CHECK(done.wait(30s));
}

} // namespace

TEST_SUITE("client.async") {

  TEST_CASE_FIXTURE(fixture,
                    "48 closed loops driven only by continuations: each "
                    "commit charges what was reserved, balances end exact, "
                    "and they share batches with blocking callers") {
    REQUIRE(gate_port != 0);
    constexpr int loops = 48;
    constexpr int cycles = 10;
    constexpr int blocking_threads = 8;
    int mixed = 0; // batches with operations of both kinds, in all rounds
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      std::vector<chat_id> chats;
      for (int i = 0; i < loops; ++i)
        chats.push_back(make_chat({cycles, 0, 0}));
      std::vector<chat_id> blocking_chats;
      for (int i = 0; i < blocking_threads; ++i)
        blocking_chats.push_back(make_chat({cycles, 0, 0}));
      tracker t{loops * cycles * 3};
      countdown done{loops};
      std::atomic<int> failures{0};
      std::atomic<int> blocking_failures{0};
      surprises odd;
      std::pair<uint64_t, uint64_t> sent;
      {
        client_side side;
        client::client c{side.sys,
                         options_for(gate_port, client::role::all, true)};
        // Blocking callers on the same client at the same time.
        std::vector<std::thread> blocking;
        for (auto chat : blocking_chats)
          blocking.emplace_back([&, chat] {
            for (int i = 0; i < cycles; ++i) {
              auto r = c.reserve(chat, kind::text, "b" + std::to_string(i));
              auto s = r ? c.start(chat, r->id) : r;
              auto x =
                s ? c.commit(chat, s->id) : caf::expected<receipt>{s.error()};
              if (!x || x->charged != pockets{1, 0, 0})
                ++blocking_failures;
            }
          });
        closed_loop loop{c, t, done, failures, odd, cycles};
        for (auto chat : chats)
          loop.run(chat, 0);
        // The test thread only waits.
        CHECK(done.wait(60s));
        for (auto& x : blocking)
          x.join();
        sent = c.batches_sent();
      }
      INFO("unexpected answers: " << odd.text());
      CHECK(failures.load() == 0);
      CHECK(blocking_failures.load() == 0);
      check_exactly_once(t, loops * cycles * 3);
      for (auto chat : chats) {
        auto st = setup.status(chat);
        REQUIRE(st);
        CHECK(st->available == pockets{0, 0, 0});
        CHECK_FALSE(st->active);
        CHECK(test::sql_int("SELECT count(*) FROM ledger WHERE chat_id = "
                            + std::to_string(chat))
              == cycles);
      }
      for (auto chat : blocking_chats)
        CHECK(setup.status(chat)->available == pockets{0, 0, 0});
      // Every operation, asynchronous or blocking, travelled in a batch,
      // and batches were shared.
      const uint64_t operations = (loops + blocking_threads) * cycles * 3;
      CHECK(sent.second == operations);
      CHECK(sent.first < sent.second);
      std::set<chat_id> async_set{chats.begin(), chats.end()};
      std::set<chat_id> blocking_set{blocking_chats.begin(),
                                     blocking_chats.end()};
      auto mixed_before = mixed;
      {
        std::lock_guard<std::mutex> guard{log->mtx};
        for (auto& batch : log->batches) {
          bool a = false;
          bool b = false;
          for (auto chat : batch) {
            a = a || async_set.count(chat) > 0;
            b = b || blocking_set.count(chat) > 0;
          }
          mixed += a && b ? 1 : 0;
        }
        log->batches.clear();
      }
      MESSAGE("round " << round << ": " << sent.second << " operations in "
                       << sent.first << " batches, " << mixed - mixed_before
                       << " of them mixed");
    }
    // Continuations and blocking callers share batch messages. Whether a
    // blocking caller's operation finds continuations' operations queued is
    // up to timing: counted over the rounds' thousands of operations.
    CHECK(mixed > 0);
  }

  TEST_CASE_FIXTURE(fixture,
                    "a continuation never runs inside the call that issued "
                    "it (nor on the caller's thread): answered by a server, "
                    "issued from continuations, failing at once") {
    constexpr int chains = 64;
    constexpr int depth = 6;
    // Chains of calls each issued by the previous call's continuation, on
    // a real server, batched and not.
    for (bool batching : {true, false}) {
      CAPTURE(batching);
      std::vector<chat_id> chats;
      for (int i = 0; i < 8; ++i)
        chats.push_back(make_chat({1, 1, 0}));
      tracker t{chains * depth};
      countdown done{chains};
      std::atomic<int> failures{0};
      {
        client_side side;
        client::client c{
          side.sys, options_for(gateway_port, client::role::gateway, batching)};
        std::function<void(chat_id, int)> step = [&](chat_id chat, int left) {
          if (left == 0) {
            done.arrive();
            return;
          }
          auto slot = t.take();
          auto next = [&step, &failures, chat, left](auto& x) {
            if (!x)
              ++failures;
            step(chat, left - 1);
          };
          issue([&] {
            if (left % 2 == 0)
              c.status(chat, t.watch<chat_status>(slot, next));
            else
              c.touch(chat, t.watch<chat_status>(slot, next));
          });
        };
        for (int i = 0; i < chains; ++i)
          step(chats[i % chats.size()], depth);
        CHECK(done.wait(30s));
      }
      CHECK(failures.load() == 0);
      check_exactly_once(t, chains * depth);
    }
    // Calls that fail at once: nobody listens on either server's port, so
    // every connect is refused (the first fails over to the second). Safe
    // and unsafe operations, issued from the test thread and from
    // continuations.
    for (bool batching : {true, false}) {
      CAPTURE(batching);
      tracker t{chains * depth};
      countdown done{chains};
      std::atomic<int> wrong{0};
      surprises odd;
      {
        client_side side;
        client::client c{side.sys, options_for({{"127.0.0.1", closed_port()},
                                                {"127.0.0.1", closed_port()}},
                                               client::role::all, batching)};
        std::function<void(chat_id, int)> step = [&](chat_id chat, int left) {
          if (left == 0) {
            done.arrive();
            return;
          }
          auto slot = t.take();
          auto next = [&, chat, left](auto& x) {
            if (x || is_service_error(x.error())) {
              ++wrong;
              odd.add("an answer from nowhere");
            }
            step(chat, left - 1);
          };
          issue([&] {
            switch (left % 6) {
            case 0:
              c.status(chat, t.watch<chat_status>(slot, next));
              break;
            case 1:
              c.cancel(chat, t.watch<reservation>(slot, next));
              break;
            case 2:
              c.commit(chat, 1, t.watch<receipt>(slot, next));
              break;
            case 3:
              c.reserve(chat, kind::text, "", t.watch<reservation>(slot, next));
              break;
            case 4:
              c.start(chat, 1, t.watch<reservation>(slot, next));
              break;
            default:
              c.touch(chat, t.watch<chat_status>(slot, next));
            }
          });
        };
        for (int i = 0; i < chains; ++i)
          step(test::fresh_chat(), depth);
        CHECK(done.wait(30s));
      }
      INFO(odd.text());
      CHECK(wrong.load() == 0);
      check_exactly_once(t, chains * depth);
    }
    // No server at all: answered by an actor all the same.
    {
      tracker t{16};
      countdown done{16};
      std::atomic<int> wrong{0};
      {
        client_side side;
        client::client c{side.sys, options_for(std::vector<client::endpoint>{},
                                               client::role::all, true)};
        for (int i = 0; i < 16; ++i) {
          auto slot = t.take();
          issue([&] {
            c.status(
              test::fresh_chat(), t.watch<chat_status>(slot, [&](auto& x) {
                if (x || x.error() != caf::sec::no_actor_published_at_port)
                  ++wrong;
                done.arrive();
              }));
          });
        }
        CHECK(done.wait(30s));
      }
      CHECK(wrong.load() == 0);
      check_exactly_once(t, 16);
    }
  }

  TEST_CASE_FIXTURE(fixture,
                    "exactly one answer per call, and the service errors of "
                    "the blocking calls: 64 reserves of one chat give one "
                    "reservation and 63 busy; every state answers as the "
                    "blocking API does") {
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      auto chat = make_chat({0, 10, 0});
      auto sent = race_reserves(
        options_for(gateway_port, client::role::gateway, true), chat);
      CHECK(sent.second == 64);
      auto st = setup.status(chat);
      REQUIRE(st);
      REQUIRE(st->active);
      CHECK(st->available == pockets{0, 10, 0}); // held, not charged
    }
    // Every state of a chat: the asynchronous answers are the blocking ones.
    auto want = blocking_script(*this);
    check_async_script(*this, options_for(gate_port, client::role::all, true),
                       want);
    // And through the role ports (the gateway's and the worker's clients).
    tracker t{64};
    std::vector<std::string> got;
    {
      client_side side;
      client::client gateway{
        side.sys, options_for(gateway_port, client::role::gateway, true)};
      client::client worker{
        side.sys, options_for(worker_port, client::role::worker, true)};
      // The script's calls, each to the client of its role.
      struct split_calls {
        async_calls gateway;
        async_calls worker;
        auto touch(chat_id chat) { return gateway.touch(chat); }
        auto status(chat_id chat) { return gateway.status(chat); }
        auto cancel(chat_id chat) { return gateway.cancel(chat); }
        auto reserve(chat_id chat, kind k, const std::string& request_id) {
          return gateway.reserve(chat, k, request_id);
        }
        auto start(chat_id chat, reservation_id id) {
          return worker.start(chat, id);
        }
        auto heartbeat(chat_id chat, reservation_id id) {
          return worker.heartbeat(chat, id);
        }
        auto commit(chat_id chat, reservation_id id) {
          return worker.commit(chat, id);
        }
        auto fail(chat_id chat, reservation_id id) {
          return worker.fail(chat, id);
        }
      };
      split_calls calls{{gateway, t}, {worker, t}};
      got = script(calls, make_chat({1, 0, 0}), test::fresh_chat());
    }
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("line " << i);
      CHECK(got[i] == want[i]);
    }
    check_exactly_once(t, want.size());
  }

  TEST_CASE("failover: safe operations issued asynchronously after the home "
            "server went away are answered by the next server; cancel and a "
            "reserve without request_id are not retried") {
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
      chat_id unsafe_chat = 0;
      chat_id status_chat = 0;
      tracker t{64};
      countdown done{jobs + 5};
      std::atomic<int> failures{0};
      surprises odd;
      std::atomic<int> cancel_errors{0};
      std::atomic<int> unsafe_errors{0};
      {
        client_side side;
        client::client c{side.sys,
                         options_for(servers, client::role::all, batching, 5s)};
        auto make = [&](pockets initial) {
          auto chat = test::chat_homed_at(c, servers, 0);
          REQUIRE(c.create({chat, initial, caf::none}));
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
        unsafe_chat = make({3, 0, 0});
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
            if (!x || x->chat != status_chat
                || x->available != pockets{3, 2, 1})
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
        // Unsafe: the connection error comes back, B never sees them.
        slot = t.take();
        issue([&] {
          c.reserve(unsafe_chat, kind::text, "",
                    t.watch<reservation>(slot, [&](auto& x) {
                      if (x || is_service_error(x.error()))
                        odd.add("unsafe reserve: " + summary(x));
                      else
                        ++unsafe_errors;
                      done.arrive();
                    }));
        });
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
      CHECK(unsafe_errors.load() == 1);
      CHECK(cancel_errors.load() == 1);
      check_exactly_once(t, jobs * 3 + 5);
      // Postgres: each job charged once; the cancel and the unsafe reserve
      // never reached B.
      for (auto chat : job_chats) {
        CHECK(setup.status(chat)->available == pockets{2, 0, 0});
        CHECK(test::sql_int("SELECT count(*) FROM ledger WHERE chat_id = "
                            + std::to_string(chat))
              == 1);
      }
      auto cancelled = setup.status(cancel_chat);
      REQUIRE(cancelled);
      CHECK(cancelled->active);
      auto unsafe = setup.status(unsafe_chat);
      REQUIRE(unsafe);
      CHECK_FALSE(unsafe->active);
      auto safe = setup.status(safe_chat);
      REQUIRE(safe);
      REQUIRE(safe->active);
      CHECK(safe->active->request_id == "safe");
    }
  }

  TEST_CASE_FIXTURE(fixture,
                    "batching off, or a server without batches: the same "
                    "answers, one request per call, batches_sent() stays "
                    "{0, 0}") {
    using none_sent = std::pair<uint64_t, uint64_t>;
    // A port that offers every operation but no batches: the API itself.
    auto plain =
      server.sys.middleman().publish(server.api, 0, "127.0.0.1", true);
    REQUIRE(plain);
    auto want = blocking_script(*this);
    {
      std::lock_guard<std::mutex> guard{log->mtx};
      log->batches.clear(); // the blocking client's
    }
    struct setting {
      const char* name;
      client::options opts;
    };
    std::vector<setting> variants{
      {"batching off", options_for(gate_port, client::role::all, false)},
      {"server without batches", options_for(*plain, client::role::all, true)},
    };
    for (auto& v : variants) {
      CAPTURE(v.name);
      check_async_script(*this, v.opts, want);
      // 64 reserves of one chat.
      auto chat = make_chat({0, 10, 0});
      auto gate_before = log->received();
      auto sent = race_reserves(v.opts, chat);
      CHECK(sent == none_sent{0, 0});
      if (v.opts.servers.front().port == gate_port) // one request per call
        CHECK(log->received() - gate_before == 64);
      // Closed loops.
      constexpr int loops = 16;
      constexpr int cycles = 5;
      std::vector<chat_id> chats;
      for (int i = 0; i < loops; ++i)
        chats.push_back(make_chat({cycles, 0, 0}));
      tracker lt{loops * cycles * 3};
      countdown loops_done{loops};
      std::atomic<int> failures{0};
      surprises odd;
      {
        client_side side;
        client::client c{side.sys, v.opts};
        closed_loop loop{c, lt, loops_done, failures, odd, cycles};
        for (auto x : chats)
          loop.run(x, 0);
        CHECK(loops_done.wait(30s));
        sent = c.batches_sent();
      }
      INFO("unexpected answers: " << odd.text());
      CHECK(failures.load() == 0);
      check_exactly_once(lt, loops * cycles * 3);
      CHECK(sent == none_sent{0, 0});
      for (auto x : chats)
        CHECK(setup.status(x)->available == pockets{0, 0, 0});
    }
    // The gate saw no batch from the batching-off client.
    std::lock_guard<std::mutex> guard{log->mtx};
    CHECK(log->batches.empty());
  }

  TEST_CASE_FIXTURE(fixture,
                    "destroying the client answers every pending call "
                    "exactly once: request_receiver_down, or the real answer "
                    "when it raced in first") {
    std::vector<chat_id> chats;
    for (int i = 0; i < 8; ++i)
      chats.push_back(make_chat({0, 2, 0}));
    constexpr int calls = 40;
    // (Which thread answers is the subject of the next test case.)
    // The server holds every answer: all pending calls, batched (in flight
    // or queued behind the in-flight limit) or still connecting, end with
    // request_receiver_down.
    for (int round = 0; round < 5; ++round) {
      CAPTURE(round);
      tracker t{calls};
      answer_tally tally;
      destroy_pending(*this, chats, calls, true, release::after_answers, t,
                      tally);
      INFO("unexpected answers: " << tally.odd.text());
      CHECK(tally.receiver_down.load() == calls);
      CHECK(tally.real.load() == 0);
      CHECK(tally.other.load() == 0);
      check_exactly_once(t, calls, false);
    }
    // Batching off: a call already sent is answered when the server answers
    // (the gate opens after the client is gone), the others get
    // request_receiver_down.
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      tracker t{calls};
      answer_tally tally;
      destroy_pending(*this, chats, calls, false, release::after_destroy, t,
                      tally);
      INFO("unexpected answers: " << tally.odd.text());
      CHECK(tally.real.load() + tally.receiver_down.load() == calls);
      CHECK(tally.other.load() == 0);
      check_exactly_once(t, calls, false);
    }
    // The race: the server's answers arrive while the client is destroyed.
    for (bool batching : {true, false}) {
      for (int round = 0; round < 20; ++round) {
        CAPTURE(batching);
        CAPTURE(round);
        tracker t{calls};
        answer_tally tally;
        destroy_pending(*this, chats, calls, batching, release::racing_destroy,
                        t, tally);
        INFO("unexpected answers: " << tally.odd.text());
        CHECK(tally.real.load() + tally.receiver_down.load() == calls);
        CHECK(tally.other.load() == 0);
        check_exactly_once(t, calls, false);
      }
    }
    // Still connecting: the server never finishes CAF's handshake; the
    // connects time out after the client is gone.
    {
      mute_listener mute;
      tracker t{8};
      countdown done{8};
      answer_tally tally;
      {
        client_side side;
        auto c = std::make_unique<client::client>(
          side.sys, options_for(mute.port, client::role::gateway, true, 1s));
        issue_gateway_calls(*c, chats, 8, t, tally, done);
        c.reset();
        CHECK(done.wait(30s));
      }
      INFO("unexpected answers: " << tally.odd.text());
      CHECK(tally.receiver_down.load() == 8);
      CHECK(tally.other.load() == 0);
      check_exactly_once(t, 8, false);
    }
  }

  TEST_CASE_FIXTURE(fixture,
                    "a call still queued for its batch when the client is "
                    "destroyed is answered on a client thread, never by the "
                    "thread destroying the client") {
    auto chat = make_chat({0, 2, 0});
    // One client system for all rounds: where continuations ran is known
    // when each round's calls have all been answered.
    constexpr int rounds = 200;
    tracker t{rounds * 10};
    std::atomic<int> wrong{0};
    int rounds_with_caller = 0;
    {
      client_side side;
      for (int round = 0; round < rounds; ++round) {
        close_gate();
        countdown done{10};
        auto c = std::make_unique<client::client>(
          side.sys, options_for(gate_port, client::role::gateway, true));
        auto call = [&] {
          auto slot = t.take();
          issue([&] {
            c->status(chat, t.watch<chat_status>(slot, [&](auto& x) {
              if (x || x.error() != caf::sec::request_receiver_down)
                ++wrong;
              done.arrive();
            }));
          });
        };
        // Four batches in flight, held by the server (the client allows
        // four per server: client.cpp's batcher_options) ...
        for (int i = 0; i < 4; ++i) {
          auto before = log->received();
          call();
          REQUIRE(log->wait_for(before + 1, 30s));
        }
        // ... so these wait in the client's queue.
        for (int i = 0; i < 6; ++i)
          call();
        auto before = t.on_caller.load();
        c.reset();
        REQUIRE(done.wait(30s));
        open_gate();
        rounds_with_caller += t.on_caller > before ? 1 : 0;
      }
    }
    MESSAGE("rounds in which ~client ran continuations on its own thread: "
            << rounds_with_caller << " of " << rounds);
    CHECK(wrong.load() == 0);
    check_exactly_once(t, rounds * 10);
  }

  TEST_CASE_FIXTURE(fixture,
                    "batching off: a call pending on a silent server when the "
                    "client is destroyed gets request_receiver_down (not its "
                    "request timeout)") {
    auto chat = make_chat({0, 2, 0});
    close_gate(); // silent from now on
    tracker t{8};
    countdown done{8};
    answer_tally tally;
    {
      client_side side;
      auto c = std::make_unique<client::client>(
        side.sys, options_for(gate_port, client::role::gateway, false, 1s));
      auto before = log->received();
      issue_gateway_calls(*c, {chat}, 8, t, tally, done);
      // Every call reached the server: each is its own pending request.
      REQUIRE(log->wait_for(before + 8, 30s));
      c.reset();
      CHECK(done.wait(30s));
      open_gate();
    }
    INFO("unexpected answers: " << tally.odd.text());
    CHECK(tally.receiver_down.load() == 8);
    CHECK(tally.other.load() == 0);
    check_exactly_once(t, 8);
  }
}
