// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's simulated users: gateways (touch, reserve with double
// and triple taps, cancel at random moments, status), workers (start,
// heartbeat or not, commit, fail, time out, die silently, come back late
// after a sweep, call uncertain when their provider timed out), a
// reconciler (resolves uncertain jobs either way, twice, both ways at once,
// late or never) and an admin (top-ups retried by payment id, some of them
// grants that expire within the run at other priorities and sources, voids
// of those by grant or payment id, premium changes). Every request and
// answer goes to the recorder.
#pragma once

#include "client/client.hpp"
#include "protocol/catalog.hpp"
#include "tools/chaos/record.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace chargeonce::chaos {

/// A stop flag that sleeping threads notice at once.
class stop_flag {
public:
  /// Sleeps `ms`; false if the run is stopping (then returns early).
  bool nap(int64_t ms);
  void raise();
  bool raised() const { return stop_; }

private:
  std::atomic<bool> stop_{false};
  std::mutex mtx_;
  std::condition_variable cv_;
};

struct workload_options {
  uint64_t seed = 1;
  chat_id first_chat = 0; ///< chats first+1 … first+chats
  int64_t chats = 48;
  /// Chats after those, reserved by the worker processes that get killed.
  int64_t process_chats = 8;
  size_t gateways = 4;
  size_t workers = 4;
  /// A late worker sleeps this long before it comes back: past any
  /// deadline plus a sweep.
  int64_t late_ms = 9000;
  /// What the servers sell: the kinds reserved, the pockets chats start
  /// with.
  catalog products = builtin_catalog({});
  /// Before the threads start (and the faults with them), make one job of
  /// each sort the self-tests forge from: a cancel while queued, a commit of
  /// fewer units than held and a whole one after it (two charges in a row),
  /// a job left uncertain and unresolved.
  bool plant = false;
  /// The servers' refill-interval: a window this old is refilled by the
  /// chat's next activity.
  int64_t refill_interval_ms = 3000;
};

/// A grant a top-up made, for a later void.
struct granted {
  chat_id chat = 0;
  int64_t grant = 0;
  uint64_t pay = 0; ///< its payment id's number
};

/// A reserved job handed from gateways to workers.
struct job {
  chat_id chat = 0;
  reservation_id id = 0;
  int32_t units = 1; ///< what it may cost at most
};

/// An uncertain job handed from a worker to the reconciler.
struct to_reconcile {
  job of;
  int64_t due_us = 0; ///< when the reconciler gets to it
};

class workload {
public:
  workload(client::client& c, recorder& rec, workload_options opts);
  ~workload();

  /// Registers the chats with seeded starting pockets (before any fault).
  bool create_chats(std::mt19937_64& rng);
  /// Before start(): the jobs of workload_options::plant, then one of each
  /// answer a run is checked for that chance alone might not give a short
  /// one: a reserve refused busy, a cancel while queued, a cancel of a
  /// started job that asks its worker to stop (and the heartbeat that
  /// tells it), a job of unknown outcome resolved succeeded and then
  /// refused the other way (invalid_state). On chats of their own (of the
  /// worker processes' range, which only those and these use), each
  /// request repeated with the same ids while its outcome is unknown.
  /// "" or what failed.
  std::string plant();
  void start();
  void stop();
  /// The chat that took the planted jobs (see `plant`); 0 when none did.
  chat_id planted_chat() const { return planted_chat_; }
  /// The chat of plant_grants(), created without daily pockets; 0: none.
  chat_id grant_chat() const { return grant_chat_; }

  /// One status request, recorded: what a fault sends while Postgres is
  /// down, so that the run has an answer from that time.
  op_record probe();
  /// Once the run's refill-interval has passed since plant(), a touch of
  /// the chat the answers were planted on: its window, opened by them, is
  /// refilled (a refill row in every run) unless a refill came before.
  void touch_after_refill_interval();
  /// --self-test-window-paid-twice: a job on the planted chat reserved and
  /// started just before its window is due, committed just after a touch
  /// refilled it: a charge that a past window paid, in every run. False
  /// when no window was straddled (see straddle_attempts_max) or a request
  /// was refused.
  bool straddle_window();
  /// A job reserved, started and committed on a chat of its own, each
  /// request sent only while `stalled()` holds; true once the commit was
  /// acknowledged. See fault_options::commit_while.
  bool commit_while(const std::function<bool()>& stalled);

  /// The pockets each chat was created with.
  std::map<chat_id, pockets> initial;
  /// How many active jobs each chat allows (1, 2 or 4).
  std::map<chat_id, int32_t> max_active_jobs;

private:
  /// A kind of the catalog, at random; the last one (image when built in)
  /// for the jobs that are cancelled and those of killed workers.
  kind some_kind(std::mt19937_64& rng) const;
  kind paid_kind() const;
  /// What one job costs at most in `pocket` (1 when no kind uses it).
  int32_t highest_price(const std::string& pocket) const;
  pockets starting_pockets(std::mt19937_64& rng) const;

  /// Creates the chat, repeated while the outcome is unknown.
  bool create(const chat_spec& spec);
  void gateway(uint32_t actor, uint64_t seed);
  void worker(uint32_t actor, uint64_t seed);
  void admin(uint32_t actor, uint64_t seed);
  void reconciler(uint32_t actor, uint64_t seed);
  /// The provider timed out: uncertain (retried while the outcome of that
  /// is unknown); sometimes the worker's stale commit follows.
  void job_uncertain(uint32_t actor, const job& j, std::mt19937_64& rng);
  /// The last attempt's record.
  op_record resolve(uint32_t actor, const job& j, const std::string& outcome,
                    int32_t units);
  /// `units` < 0: as the key has it (a third of the jobs up to 3).
  /// `hand_out`: the job goes to the workers and to late retries; a
  /// planted one does not.
  op_record reserve(uint32_t actor, chat_id chat, const kind& k,
                    uint64_t request, int32_t units = -1, bool hand_out = true);
  void taps(uint32_t actor, chat_id chat, std::mt19937_64& rng);
  void cancel(uint32_t actor, chat_id chat);
  op_record cancel_job(uint32_t actor, const op_record& reserved);
  void retry_late(uint32_t actor, std::mt19937_64& rng);
  void run_job(uint32_t actor, const job& j, std::mt19937_64& rng);
  void fail_job(uint32_t actor, const job& j);
  void honour_cancel(uint32_t actor, const job& j, std::mt19937_64& rng);
  /// Starts the job as `worker` (its identity for this attempt).
  bool start_job(uint32_t actor, const job& j, const std::string& worker);
  void commit_job(uint32_t actor, const job& j, int attempts,
                  int32_t units = 0);
  void top_up(uint32_t actor, chat_id chat, int64_t credits, uint64_t pay,
              std::mt19937_64& rng);
  /// A top-up whose grant has `terms`, retried after an unknown outcome
  /// (and sometimes anyway) with the same payment id and terms; the last
  /// attempt's record. `remember`: acknowledged, it may be voided later.
  op_record grant_top_up(uint32_t actor, chat_id chat, int64_t credits,
                         uint64_t pay, const grant_terms& terms, bool remember,
                         std::mt19937_64& rng);
  /// A grant top-up of a chat of the grants' share: an expiry a few
  /// seconds to tens of seconds away, a priority and a source at random.
  void some_grant(uint32_t actor, std::mt19937_64& rng);
  /// Voids a grant a top-up made, by its id or its payment id, retried
  /// after an unknown outcome and sometimes anyway (a repeat changes
  /// nothing); the last attempt's record.
  op_record void_grant(uint32_t actor, const granted& g, bool by_payment,
                       std::mt19937_64& rng);
  void void_some_grant(uint32_t actor, std::mt19937_64& rng);
  /// One hold of each sort the grant invariants judge, on grant_chat():
  /// a promo grant that expires while a job holds it (the job then charges
  /// part of it), a grant the hold also spans, one voided before, by
  /// payment id and again by grant id. Runs beside the workload (its own
  /// chat, its own thread); a step refused or lost to a fault ends it.
  void plant_grants();
  /// The first kind that pays from the balance (nullptr: none).
  const kind_spec* balance_kind() const;
  chat_id pick_chat(std::mt19937_64& rng) const;
  uint64_t next_key() { return ++keys_; }
  std::string request_id(uint64_t key) const;

  /// The jobs of workload_options::plant on `chat`; false at the first
  /// answer that is not the planted one.
  bool plant_forgeries_on(chat_id chat);
  /// The answers plant() makes certain, on `chat` (which allows one job).
  bool plant_coverage_on(chat_id chat);
  /// Repeats `request` (the same ids each time) while its outcome is
  /// unknown, at most plant_attempts_max times; the last answer.
  template <class Request>
  op_record definite(Request&& request);
  /// One request of `what` about job `id`, recorded; `send` returns the
  /// client's answer.
  template <class Send>
  op_record once(op what, chat_id chat, reservation_id id, Send&& send);
  /// The `i`th chat of the worker processes' range (1 … process_chats).
  chat_id process_chat(int64_t i) const {
    return opts_.first_chat + opts_.chats + i;
  }

  void push(const job& j);
  bool pop(job& out);

  client::client& client_;
  recorder& rec_;
  workload_options opts_;
  stop_flag stop_;
  std::atomic<uint64_t> keys_{0};
  std::mutex queue_mtx_;
  std::condition_variable queue_cv_;
  std::deque<job> queue_;
  std::set<reservation_id> queued_ever_; ///< a job is handed out once
  /// Recent reserves (chat, kind, request key), for retries that come late.
  std::mutex recent_mtx_;
  std::deque<op_record> recent_;
  std::mutex reconcile_mtx_;
  std::deque<to_reconcile> reconcile_;
  /// Two reconcilers disagreed and one was refused (`invalid_state`): until
  /// then every resolve is such a pair, so each run covers that answer.
  std::atomic<bool> disagreed_{false};
  std::vector<std::thread> threads_;
  chat_id planted_chat_ = 0;
  chat_id coverage_chat_ = 0; ///< where plant() made the answers certain
  chat_id grant_chat_ = 0;    ///< plant_grants()'s
  /// Grants top-ups made, the latest granted_max, for voids.
  std::mutex granted_mtx_;
  std::deque<granted> granted_;
  std::chrono::steady_clock::time_point planted_at_;
};

} // namespace chargeonce::chaos
