// SPDX-License-Identifier: Apache-2.0
// The seeded simulation's driver: the real supervisor, registry and chat
// actors on CAF's deterministic scheduler, over simulated persistence
// actors. Simulated users, workers and admins send requests through
// short-lived client actors; every run of the scheduler picks the next
// actor at random (seeded), so messages between actors interleave
// differently per seed. Faults are injected between and during steps; the
// auditor runs after every step.
#pragma once

#include "actors/supervisor_actor.hpp"
#include "protocol/errors.hpp"
#include "tests/simulation/audit.hpp"
#include "tests/simulation/world.hpp"
#include "tests/support/fixture.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace chargeonce::test {

/// One request of a simulated client, answered or not.
struct sim_call {
  std::string what; ///< "commit(3,17)", for the trail
  chat_id chat = 0;
  caf::timestamp sent;
  bool done = false;
  bool dropped = false;       ///< the client's connection lost the answer
  bool during_outage = false; ///< answered while storage was unreachable
  caf::error err;             ///< the answer, if it is an error
};

/// A job a worker took from the queue, and how this worker behaves.
struct sim_job {
  chat_id chat = 0;
  reservation_id id = 0;
  bool started = false;
  bool heartbeats = false; ///< keeps its lease alive while running
  /// finish, fail, hang, die, come back late, or its provider times out
  /// (uncertain: 10 resolved later, 11 never)
  int fate = 0;
  /// What its commit names: 0 (the whole hold), fewer units than held, or
  /// (a buggy worker) one more, which must be refused.
  int32_t commit_units = 0;
  caf::timestamp back_at; ///< a late worker's return
  /// A heartbeat answered cancel_requested: the user cancelled the started
  /// job, and the worker aborts (fail) or commits what was done.
  bool cancel_seen = false;
  /// The identity its worker names when it starts the job; a second
  /// delivery of the job names another.
  std::string worker{};
};

/// The caller cannot know whether it happened: storage_unavailable, or a
/// CAF error (timeout, a chat actor killed). It retries later.
inline bool sim_unknown_outcome(const caf::error& err) {
  return err == ec::storage_unavailable
         || err.category() != caf::atom(error_category_name);
}

class simulation : public deterministic_fixture {
public:
  static constexpr int chats_per_run = 6;
  static constexpr int steps_per_run = 150;
  /// The chat of the planted straddling job (straddle()): no random step
  /// picks it, so its job stays open until its window turns.
  static constexpr chat_id straddle_chat = chats_per_run + 1;
  /// The chat of the planted grants (plant_grants()), no random step's
  /// either.
  static constexpr chat_id grant_chat = chats_per_run + 2;
  /// The step at which the grants are planted: a third into the run, with
  /// the other chats' jobs and faults around it.
  static constexpr int grant_step = steps_per_run / 3;

  /// `chat_kill_reason`: how kill_chat() ends a chat actor; a crash by
  /// default. `products`: what the chats buy.
  simulation(
    uint64_t seed, sim_mutant mutant,
    caf::exit_reason chat_kill_reason = caf::exit_reason::unhandled_exception,
    catalog products = builtin_catalog({}));
  ~simulation();

  /// Runs the seed; returns the first violation, or an empty string.
  std::string run();

  std::shared_ptr<sim_world> world = std::make_shared<sim_world>();
  std::ostringstream trail; ///< what happened, printed for a failing seed
  std::map<std::string, uint64_t> stats; ///< driver-side events and faults
  sim_auditor auditor;

private:
  // -- scheduler and clock --
  caf::timestamp now();
  void settle();
  void pass_time(caf::timespan d);
  /// Advances to `t`, firing the timers due then, without running them.
  void pass_time_until(caf::timestamp t);

  // -- requests --
  template <class T, class... Ts>
  std::shared_ptr<sim_call> call(std::string what, chat_id chat,
                                 std::function<void(caf::expected<T>&)> then,
                                 Ts... xs);
  void issue_reserve(chat_id c, kind k, const std::string& rid);
  /// A start naming the worker `who` (the job's own, or a second
  /// delivery's).
  void issue_start(reservation_id id, const std::string& who);
  void issue_commit(reservation_id id);
  /// A buggy worker's commit of a job whose start answered not_found.
  void stale_commit(reservation_id id, chat_id c);
  /// A request whose answer nobody acts upon (the auditor still sees it).
  template <class T, class... Ts>
  void ask(std::string what, chat_id chat, Ts... xs) {
    call<T>(std::move(what), chat, nullptr, xs...);
  }
  /// Hands a status answer to the auditor (invariant 16).
  std::function<void(caf::expected<chat_status>&)> checked_status() {
    return [this](caf::expected<chat_status>& x) {
      if (x)
        auditor.on_status(*x);
    };
  }
  /// Sends a request again, half a second apart, until it is answered
  /// with something other than an unknown outcome, a bounded number of
  /// times; `then` runs with every answer, late ones included.
  template <class T, class... Ts>
  caf::expected<T> until_known(std::string what, chat_id chat,
                               std::function<void(caf::expected<T>&)> then,
                               Ts... xs);

  // -- steps --
  void setup();
  void step();
  void user_taps();
  void user_cancels(bool race_start);
  void worker_acts();
  /// A worker that learnt of a cancel request: by its fate, it aborts,
  /// commits anyway, or commits one unit (stopped half-way).
  void worker_honours_cancel(reservation_id id);
  /// The provider call timed out: uncertain, and (fate 10) a reconciler
  /// will resolve it.
  void worker_uncertain(reservation_id id);
  /// A reconciler asks the provider and resolves one uncertain job: either
  /// way, twice, both ways at once, or while the worker's stale commit
  /// arrives.
  void reconciler_acts();
  void late_workers_return();
  /// The planted straddling job: reserved and started shortly before its
  /// chat's window turns, committed after the refill. Once per run, when
  /// the window is about to turn, or `forced` at the end of a run too
  /// short for it.
  void straddle(bool forced);
  void admin_acts();
  /// A top-up: new, with terms (none, an expiry inside the run, a
  /// priority, a source), or a retry of an earlier payment with its terms.
  void admin_tops_up(chat_id c);
  /// An admin voids a grant of the chat (often one a job holds), by id or
  /// by its payment id.
  void admin_voids(chat_id c);
  /// Creates the planted grants' chat: no pockets, two jobs at once, and
  /// picks the kind it buys (one paid from balance).
  void create_grant_chat();
  /// Grants in every run whose cases are not left to the odds: a hold
  /// split over several grants whose creation order is not the spending
  /// order, a grant voided and one expiring while a job holds them, a
  /// reserve after the expiry, and the holding job's end letting its
  /// credits of both go.
  void plant_grants();
  void outage();
  void kill_persistence();
  void kill_chat(bool mid_operation);
  void passivation_race();
  void drain();

  int pick(int n);
  chat_id some_chat();
  /// The catalog's first and last kinds (text and image when built in).
  kind first_kind() const;
  kind last_kind() const;

  std::mt19937_64 rng_;
  supervisor_options options_;
  supervisor_actor root_;
  caf::actor api_;
  std::vector<caf::actor> members_; ///< every persistence actor spawned
  std::vector<caf::actor> clients_; ///< every client actor spawned
  std::vector<std::shared_ptr<sim_call>> calls_;
  std::vector<std::function<void()>> completed_; ///< answers to act upon
  std::map<reservation_id, sim_job> jobs_;
  /// Uncertain jobs a reconciler will resolve (chat, units its commit names).
  std::map<reservation_id, std::pair<chat_id, int32_t>> to_resolve_;
  std::map<chat_id, caf::timestamp> last_answer_;
  sim_acks acks_;
  /// A gateway subscribed from the first event: what it heard, in order,
  /// and why the event bus cut it off, if it did.
  caf::actor gateway_;
  std::shared_ptr<std::vector<event_record>> heard_ =
    std::make_shared<std::vector<event_record>>();
  std::shared_ptr<std::string> cut_off_ = std::make_shared<std::string>();
  uint64_t payments_ = 0;
  /// Each payment's grant terms, which a retry of it gives again.
  std::map<std::string, grant_terms> terms_of_;
  caf::exit_reason kill_reason_;
  /// The kind of the planted straddling job, paid first from a daily
  /// pocket (empty: the catalog has none), and whether it was planted.
  std::string straddle_kind_;
  bool straddled_ = false;
  /// The kind the planted grants pay for (empty: no kind is paid from
  /// balance) and the balance it costs per unit.
  std::string grant_kind_;
  int32_t grant_price_ = 0;
};

/// Tries of each request of a planted job, half a second apart: long
/// enough for a stall, a reconnect or a restart left by an earlier fault
/// to end.
inline constexpr int known_tries_max = 40;

/// Sends one request from a fresh client actor; `then` runs in settle()
/// with the answer (a dropped connection's caller sees request_timeout).
template <class T, class... Ts>
std::shared_ptr<sim_call>
simulation::call(std::string what, chat_id chat,
                 std::function<void(caf::expected<T>&)> then, Ts... xs) {
  auto rec = std::make_shared<sim_call>();
  rec->what = std::move(what);
  rec->chat = chat;
  rec->sent = now();
  if (pick(100) < 3) {
    rec->dropped = true;
    ++world->faults["client_dropped_answer"];
  }
  calls_.push_back(rec);
  auto w = world;
  auto* outbox = &completed_;
  auto* sim = this;
  auto finish = [rec, w, outbox, sim, then](caf::expected<T> x) {
    rec->done = true;
    rec->during_outage = w->outage;
    if (!x)
      rec->err = x.error();
    outbox->push_back([rec, sim, then, x]() mutable {
      sim->last_answer_[rec->chat] = sim->now();
      if (rec->during_outage)
        sim->auditor.on_outage_answer(rec->what, rec->err);
      sim->trail << ' ' << rec->what << '='
                 << (x ? std::string{"ok"} : error_name(x.error()))
                 << (rec->dropped ? "(lost)" : "");
      if (rec->dropped)
        x = caf::make_error(caf::sec::request_timeout);
      if (then)
        then(x);
    });
  };
  auto api = api_;
  clients_.push_back(sys.spawn([=](caf::event_based_actor* client) {
    client->request(api, caf::infinite, xs...)
      .then([=](T& x) { finish(std::move(x)); },
            [=](caf::error& e) { finish(std::move(e)); });
  }));
  return rec;
}

template <class T, class... Ts>
caf::expected<T>
simulation::until_known(std::string what, chat_id chat,
                        std::function<void(caf::expected<T>&)> then, Ts... xs) {
  auto answer = std::make_shared<std::optional<caf::expected<T>>>();
  auto known = [answer] {
    return answer->has_value()
           && (**answer || !sim_unknown_outcome((*answer)->error()));
  };
  for (int i = 0; i < known_tries_max; ++i) {
    call<T>(
      what, chat,
      [answer, known, then](caf::expected<T>& x) {
        if (then)
          then(x);
        if (!known())
          answer->emplace(x);
      },
      xs...);
    settle();
    if (!known())
      pass_time(
        std::chrono::milliseconds(500)); // a late answer may come meanwhile
    if (known())
      return **answer;
  }
  return caf::make_error(caf::sec::request_timeout);
}

} // namespace chargeonce::test
