// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/workload.hpp"

#include "protocol/errors.hpp"
#include "protocol/time.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace chargeonce::chaos {

namespace {

/// Jobs waiting for a worker; beyond this a new job is dropped (swept later).
constexpr size_t queue_max = 64;
constexpr int retries_max = 4; ///< commit/fail/top-up after unknown outcome
/// Reserves remembered for a late retry: about the last second's worth.
constexpr size_t recent_max = 64;
/// The job limits chats are created with, one each in turn; 1 is the
/// plan's default (no limit of the chat's own).
constexpr int32_t job_limits[] = {1, 2, 4};
/// A planted request (or a chat's creation) whose outcome stays unknown is
/// sent again this often, this long apart: a liveness bound of 30 s and
/// more, where a quiet machine needs one attempt and a formation whose
/// primary just moved a few seconds.
constexpr int plant_attempts_max = 120;
constexpr auto plant_retry_pause = std::chrono::milliseconds(250);
/// The actor of probes and of the requests of a stalled replication.
constexpr uint32_t probe_actor = 900;
/// A job that straddles a window has its window touched this long after the
/// window is due, however the clocks jitter.
constexpr int64_t straddle_lag_us = 300'000;
/// Windows tried before the straddle gives up (a job the sweep released
/// meanwhile, a window turned before the job was reserved).
constexpr int straddle_attempts_max = 3;
/// Every grant_chat_every-th chat of the gateways' range also gets grant
/// top-ups with expiries and voids: a quarter of the chats, so that the
/// rest of the workload keeps its share of the run.
constexpr int64_t grant_chat_every = 4;
/// Where those grants stand in the spending order, and what they expire in:
/// a few seconds to tens of seconds, so that most expire within a run and
/// some while a job holds them.
constexpr int32_t grant_priorities[] = {10, 50, 100, 150};
constexpr const char* grant_sources[] = {"promo", "admin", "purchase"};
constexpr int64_t grant_expiry_ms_min = 2000;
constexpr int64_t grant_expiry_ms_max = 20000;
/// Grants remembered for voids: about the last few seconds' worth.
constexpr size_t granted_max = 32;
/// plant_grants(): its promo grant expires this long after its top-up, long
/// after the hold is taken and before the job's sweep deadline (6 s), and
/// the job heartbeats this often meanwhile (its lease is 2 s).
constexpr auto planted_expiry = std::chrono::milliseconds(2500);
constexpr auto planted_heartbeat = std::chrono::milliseconds(700);

op_record begin(op what, uint32_t actor, chat_id chat, reservation_id id = 0) {
  op_record r;
  r.what = what;
  r.actor = actor;
  r.chat = chat;
  r.id = id;
  r.sent_us = now_us();
  return r;
}

void fill(op_record& r, const reservation& x) {
  r.id = x.id;
  r.amounts = x.held;
  r.units = x.units;
  r.held_units = x.held_units;
  r.job = x.kind;
  r.created_us = to_unix_micros(x.created_at);
  r.ended = !is_active(x.status);
  r.cancel_requested = x.cancel_requested;
  r.window = x.window;
}

void fill(op_record& r, const resolution& x) {
  r.amounts = x.charged;
  r.job = x.kind;
  r.window = x.window;
}

void fill(op_record& r, const receipt& x) {
  r.amounts = x.charged;
  r.job = x.kind;
  r.window = x.window;
}

void fill(op_record& r, const chat_status& x) {
  r.amounts = x.amounts;
  r.window = x.window;
}

void fill(op_record& r, const top_up_receipt& x) {
  r.credits = x.credits;
  r.grant = x.grant_id;
}

void fill(op_record& r, const grant_info& x) {
  r.grant = x.id;
}

template <class T>
void finish(recorder& rec, op_record& r, const caf::expected<T>& x) {
  if (x) {
    r.acked_us = now_us();
    r.result = static_cast<uint8_t>(outcome::ok);
    fill(r, *x);
  } else {
    set_error(r, x.error());
  }
  rec.add(r);
}

/// An answer that leaves the outcome unknown: worth repeating.
bool unknown(const op_record& r) {
  return r.result == static_cast<uint8_t>(outcome::transport)
         || r.result == static_cast<uint8_t>(ec::storage_unavailable);
}

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>{lo, hi}(rng);
}

double chance(std::mt19937_64& rng) {
  return std::uniform_real_distribution<double>{0, 1}(rng);
}

/// The workload's units 0 means "not named": the calls without units (one
/// unit at reserve, the whole hold at commit and resolve). An explicit 0
/// is invalid_argument.
caf::expected<reservation> reserve_units(client::client& c, chat_id chat,
                                         const kind& k,
                                         const std::string& request_id,
                                         int32_t units) {
  return units == 0 ? c.reserve(chat, k, request_id)
                    : c.reserve(chat, k, request_id, units);
}

caf::expected<receipt> commit_units(client::client& c, chat_id chat,
                                    reservation_id id, int32_t units) {
  return units == 0 ? c.commit(chat, id) : c.commit(chat, id, units);
}

caf::expected<resolution> resolve_units(client::client& c, chat_id chat,
                                        reservation_id id,
                                        const std::string& outcome,
                                        int32_t units) {
  return units == 0 ? c.resolve(chat, id, outcome)
                    : c.resolve(chat, id, outcome, units);
}

/// Sleeps until `us`, microseconds since the epoch on the system clock
/// (which Postgres' now(), the windows' clock, shares on this machine).
void sleep_until_us(int64_t us) {
  std::this_thread::sleep_until(
    std::chrono::system_clock::time_point{std::chrono::microseconds{us}});
}

} // namespace

// -- stop flag ----------------------------------------------------------------

bool stop_flag::nap(int64_t ms) {
  std::unique_lock<std::mutex> guard{mtx_};
  cv_.wait_for(guard, std::chrono::milliseconds(ms),
               [this] { return stop_.load(); });
  return !stop_;
}

void stop_flag::raise() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stop_ = true;
  }
  cv_.notify_all();
}

// -- setup --------------------------------------------------------------------

workload::workload(client::client& c, recorder& rec, workload_options opts)
    : client_(c), rec_(rec), opts_(std::move(opts)) {}

workload::~workload() {
  stop();
}

kind workload::some_kind(std::mt19937_64& rng) const {
  const auto& kinds = opts_.products.kinds;
  auto last = static_cast<int64_t>(kinds.size()) - 1;
  return kind{kinds[static_cast<size_t>(uniform(rng, 0, last))].name};
}

kind workload::paid_kind() const {
  return kind{opts_.products.kinds.back().name};
}

int32_t workload::highest_price(const std::string& pocket) const {
  int32_t out = 1;
  for (const auto& k : opts_.products.kinds)
    for (const auto& source : k.pay_from)
      if (source.pocket == pocket)
        out = std::max(out, source.price);
  return out;
}

pockets workload::starting_pockets(std::mt19937_64& rng) const {
  // Up to 20 jobs' worth of a daily pocket, 30 of balance.
  pockets out;
  for (const auto& p : opts_.products.pockets) {
    int64_t jobs = p.purchased ? 30 : 20;
    out.set(p.name, static_cast<int32_t>(uniform(rng, 0, jobs)
                                         * highest_price(p.name)));
  }
  return out;
}

bool workload::create_chats(std::mt19937_64& rng) {
  for (int64_t i = 1; i <= opts_.chats; ++i) {
    chat_spec spec;
    spec.chat = opts_.first_chat + i;
    // Some chats start poor, so insufficient_* answers happen too.
    spec.initial = starting_pockets(rng);
    // The chats of grants start with their daily pockets empty and a
    // balance of 30 jobs' worth: until refills come, what they pay comes of
    // their grants, whose holds the grant invariants judge.
    if (i % grant_chat_every == 0)
      for (const auto& p : opts_.products.pockets)
        spec.initial.set(p.name, p.purchased ? 30 * highest_price(p.name) : 0);
    auto limit = job_limits[i % 3];
    if (limit > 1)
      spec.max_active_jobs = limit;
    if (!create(spec))
      return false;
    initial[spec.chat] = spec.initial;
    max_active_jobs[spec.chat] = limit;
  }
  for (int64_t i = 1; i <= opts_.process_chats; ++i) {
    chat_spec spec;
    spec.chat = process_chat(i);
    // Killed workers reserve paid_kind() here, again and again; the
    // planted jobs take two of these chats. plant_grants() one more, whose
    // daily pockets are empty until a refill, so that its holds take the
    // balance and span its grants.
    if (i == opts_.process_chats - 4)
      grant_chat_ = spec.chat;
    for (const auto& p : opts_.products.pockets)
      spec.initial.set(p.name, spec.chat == grant_chat_ && !p.purchased
                                 ? 0
                                 : 1000 * highest_price(p.name));
    if (!create(spec))
      return false;
    initial[spec.chat] = spec.initial;
    max_active_jobs[spec.chat] = 1;
  }
  return true;
}

bool workload::create(const chat_spec& spec) {
  // Keyed by the chat id (the range was cleared before the run): a repeat
  // after a lost answer that finds the chat finds what that attempt made.
  for (int attempt = 1;; ++attempt) {
    auto r = begin(op::create, 0, spec.chat);
    auto x = client_.create(spec);
    finish(rec_, r, x);
    if (x || (attempt > 1 && x.error() == ec::already_exists))
      return true;
    if (!unknown(r) || attempt == plant_attempts_max) {
      spdlog::error("chaos: cannot create chat={} error={}", spec.chat,
                    error_name(x.error()));
      return false;
    }
    std::this_thread::sleep_for(plant_retry_pause);
  }
}

void workload::start() {
  std::mt19937_64 seeds{opts_.seed};
  uint32_t actor = 1;
  for (size_t i = 0; i < opts_.gateways; ++i, ++actor)
    threads_.emplace_back([this, actor, s = seeds()] { gateway(actor, s); });
  for (size_t i = 0; i < opts_.workers; ++i, ++actor)
    threads_.emplace_back([this, actor, s = seeds()] { worker(actor, s); });
  threads_.emplace_back([this, actor, s = seeds()] { admin(actor, s); });
  ++actor;
  threads_.emplace_back([this, actor, s = seeds()] { reconciler(actor, s); });
  if (grant_chat_ != 0)
    threads_.emplace_back([this] { plant_grants(); });
}

void workload::stop() {
  stop_.raise();
  queue_cv_.notify_all();
  for (auto& t : threads_)
    t.join();
  threads_.clear();
}

chat_id workload::pick_chat(std::mt19937_64& rng) const {
  return opts_.first_chat + uniform(rng, 1, opts_.chats);
}

std::string workload::request_id(uint64_t key) const {
  return "chaos-" + std::to_string(opts_.seed) + "-" + std::to_string(key);
}

// -- planted jobs -------------------------------------------------------------

template <class Request>
op_record workload::definite(Request&& request) {
  op_record r;
  for (int i = 0; i < plant_attempts_max; ++i) {
    r = request();
    if (!unknown(r))
      break;
    std::this_thread::sleep_for(plant_retry_pause);
  }
  return r;
}

template <class Send>
op_record workload::once(op what, chat_id chat, reservation_id id,
                         Send&& send) {
  auto r = begin(what, 0, chat, id);
  finish(rec_, r, send());
  return r;
}

bool workload::plant_forgeries_on(chat_id chat) {
  // Recorded like every other operation, so the auditor checks them too.
  auto key = next_key();
  auto reserve_one = [&](int32_t units) {
    return definite(
      [&] { return reserve(0, chat, paid_kind(), key, units, false); });
  };
  // Named, so that --self-test-second-start always finds a start to forge
  // a second worker's from.
  auto start = [&](reservation_id id) {
    return definite([&] {
             auto r = begin(op::start, 0, chat, id);
             r.worker = "planted-" + std::to_string(id);
             finish(rec_, r, client_.start(chat, id, r.worker));
             return r;
           })
      .ok();
  };
  auto commit = [&](reservation_id id, int32_t units) {
    return definite([&] {
             auto r = begin(op::commit, 0, chat, id);
             r.units = units;
             finish(rec_, r, commit_units(client_, chat, id, units));
             return r;
           })
      .ok();
  };
  auto cancelled = reserve_one(1);
  if (!cancelled.ok())
    return false;
  auto cancel = definite([&] { return cancel_job(0, cancelled); });
  if (!cancel.ok() || cancel.cancel_requested)
    return false;
  key = next_key();
  auto captured = reserve_one(3);
  if (!captured.ok() || captured.units < 2 || !start(captured.id)
      || !commit(captured.id, 1))
    return false;
  // A second charge: the first one's ledger row then has one after it.
  key = next_key();
  auto whole = reserve_one(1);
  if (!whole.ok() || !start(whole.id) || !commit(whole.id, 0))
    return false;
  key = next_key();
  auto left = reserve_one(1);
  if (!left.ok() || !start(left.id))
    return false;
  return definite([&] {
           return once(op::uncertain, chat, left.id, [&] {
             return client_.uncertain(chat, left.id, "planted");
           });
         })
    .ok();
}

bool workload::plant_coverage_on(chat_id chat) {
  auto key = next_key();
  auto reserve_one = [&] {
    return definite(
      [&] { return reserve(0, chat, paid_kind(), key, 1, false); });
  };
  auto ask = [&](op what, reservation_id id, auto&& send) {
    return definite([&] { return once(what, chat, id, send); });
  };
  // A tap with another request id while the chat's one job is queued:
  // busy. Then that job cancelled while queued (invariants 6 and 10).
  auto queued = reserve_one();
  key = next_key();
  auto tapped = reserve_one();
  if (!queued.ok() || tapped.result != static_cast<uint8_t>(ec::busy))
    return false;
  auto cancel = definite([&] { return cancel_job(0, queued); });
  if (!cancel.ok() || cancel.cancel_requested)
    return false;
  // A started job cancelled: under the `request` policy the cancel and the
  // next heartbeat say cancel_requested, under the other it is too_late;
  // either way its worker then fails it.
  key = next_key();
  auto asked = reserve_one();
  if (!asked.ok() || !ask(op::start, asked.id, [&] {
                        return client_.start(chat, asked.id);
                      }).ok())
    return false;
  auto cancel_started = definite([&] { return cancel_job(0, asked); });
  auto beat = ask(op::heartbeat, asked.id,
                  [&] { return client_.heartbeat(chat, asked.id); });
  bool requested =
    opts_.products.kinds.back().cancel_after_start == cancel_policy::request;
  if (requested ? !(cancel_started.ok() && cancel_started.cancel_requested
                    && beat.ok() && beat.cancel_requested)
                : cancel_started.result != static_cast<uint8_t>(ec::too_late))
    return false;
  if (!ask(op::fail, asked.id, [&] {
         return client_.fail(chat, asked.id);
       }).ok())
    return false;
  // A job of unknown outcome resolved succeeded, then refused failed.
  key = next_key();
  auto unsure = reserve_one();
  if (!unsure.ok()
      || !ask(op::start, unsure.id,
              [&] { return client_.start(chat, unsure.id); })
            .ok()
      || !ask(op::uncertain, unsure.id, [&] {
            return client_.uncertain(chat, unsure.id, "planted-coverage");
          }).ok())
    return false;
  auto resolve_as = [&](const std::string& outcome) {
    return definite([&] {
      auto r = begin(op::resolve, 0, chat, unsure.id);
      r.resolution = outcome;
      finish(rec_, r, client_.resolve(chat, unsure.id, outcome));
      return r;
    });
  };
  return resolve_as("succeeded").ok()
         && resolve_as("failed").result
              == static_cast<uint8_t>(ec::invalid_state);
}

std::string workload::plant() {
  // On the worker processes' last chats, each rich in every pocket (1,000
  // jobs' worth) and used by no gateway: the jobs never find the chat busy
  // or poor. Two candidates each, should a repeat meet what a lost answer
  // already did (a second cancel of a cancelled job: not_found).
  if (opts_.plant) {
    for (auto i : {opts_.process_chats, opts_.process_chats - 2})
      if (planted_chat_ == 0 && i >= 1 && plant_forgeries_on(process_chat(i)))
        planted_chat_ = process_chat(i);
    if (planted_chat_ == 0)
      return "nothing to forge: no chat took the planted jobs";
  }
  for (auto i : {opts_.process_chats - 1, opts_.process_chats - 3})
    if (coverage_chat_ == 0 && i >= 1 && plant_coverage_on(process_chat(i)))
      coverage_chat_ = process_chat(i);
  if (coverage_chat_ == 0)
    return "cannot plant the answers every run is checked for";
  planted_at_ = std::chrono::steady_clock::now();
  return {};
}

void workload::touch_after_refill_interval() {
  if (coverage_chat_ == 0)
    return;
  std::this_thread::sleep_until(
    planted_at_ + std::chrono::milliseconds(opts_.refill_interval_ms + 500));
  auto r = begin(op::touch, 0, coverage_chat_);
  finish(rec_, r, client_.touch(coverage_chat_));
}

bool workload::straddle_window() {
  auto chat = planted_chat_;
  if (chat == 0)
    return false;
  auto touch = [&] {
    auto r = begin(op::touch, 0, chat);
    auto x = client_.touch(chat);
    finish(rec_, r, x);
    return x;
  };
  for (int attempt = 0; attempt < straddle_attempts_max; ++attempt) {
    // A touch refills a window that is due: the turn is always ahead.
    auto now = touch();
    if (!now || !now->window_started_at)
      return false;
    auto turn_us =
      to_unix_micros(*now->window_started_at) + opts_.refill_interval_ms * 1000;
    // A unit spent in this window first: a refill that changes no pocket
    // writes no ledger row, and the forgery looks for the row of the turn.
    auto spent = definite(
      [&] { return reserve(0, chat, paid_kind(), next_key(), 1, false); });
    if (!spent.ok())
      return false;
    auto spent_start = definite([&] {
      return once(op::start, chat, spent.id,
                  [&] { return client_.start(chat, spent.id); });
    });
    auto spent_commit = definite([&] {
      return once(op::commit, chat, spent.id,
                  [&] { return client_.commit(chat, spent.id); });
    });
    if (!spent_start.ok() || !spent_commit.ok())
      return false;
    // Reserved at once, committed after the turn: the window's remaining
    // refill-interval is well within the sweep-timeout.
    auto key = next_key();
    auto held =
      definite([&] { return reserve(0, chat, paid_kind(), key, 1, false); });
    if (!held.ok())
      return false;
    auto started = definite([&] {
      return once(op::start, chat, held.id,
                  [&] { return client_.start(chat, held.id); });
    });
    if (!started.ok())
      return false;
    sleep_until_us(turn_us + straddle_lag_us);
    auto turned = touch();
    auto committed = definite([&] {
      return once(op::commit, chat, held.id,
                  [&] { return client_.commit(chat, held.id); });
    });
    if (!committed.ok())
      return false;
    if (turned && turned->window > held.window
        && committed.window == held.window)
      return true;
  }
  return false;
}

op_record workload::probe() {
  auto chat = opts_.first_chat + 1;
  auto r = begin(op::status, probe_actor, chat);
  finish(rec_, r, client_.status(chat));
  return r;
}

bool workload::commit_while(const std::function<bool()>& stalled) {
  // The worker processes' chats, last first: no gateway uses them, and
  // the planted jobs there have ended.
  for (int64_t i = opts_.process_chats; i >= 1 && stalled(); --i) {
    auto chat = process_chat(i);
    auto reserved =
      reserve(probe_actor, chat, paid_kind(), next_key(), 1, false);
    if (!reserved.ok() || !stalled())
      continue;
    auto started = begin(op::start, probe_actor, chat, reserved.id);
    finish(rec_, started, client_.start(chat, reserved.id));
    if (!started.ok() || !stalled())
      continue;
    auto committed = begin(op::commit, probe_actor, chat, reserved.id);
    finish(rec_, committed, client_.commit(chat, reserved.id));
    if (committed.ok())
      return true;
  }
  return false;
}

// -- job queue ----------------------------------------------------------------

void workload::push(const job& j) {
  std::lock_guard<std::mutex> guard{queue_mtx_};
  // A double tap returns the same reservation: one job, not two.
  if (!queued_ever_.insert(j.id).second || queue_.size() >= queue_max)
    return;
  queue_.push_back(j);
  queue_cv_.notify_one();
}

bool workload::pop(job& out) {
  std::unique_lock<std::mutex> guard{queue_mtx_};
  queue_cv_.wait_for(guard, std::chrono::milliseconds(200),
                     [this] { return !queue_.empty() || stop_.raised(); });
  if (queue_.empty())
    return false;
  out = queue_.front();
  queue_.pop_front();
  return true;
}

// -- gateways -----------------------------------------------------------------

op_record workload::reserve(uint32_t actor, chat_id chat, const kind& k,
                            uint64_t key, int32_t units, bool hand_out) {
  auto r = begin(op::reserve, actor, chat);
  r.key = key;
  r.job = k;
  // A third of the jobs may cost up to 3 units; a tap of the same key asks
  // for the same.
  if (units < 0)
    units = key % 3 == 0 ? static_cast<int32_t>(1 + key / 3 % 3) : 0;
  auto x = reserve_units(client_, chat, k, request_id(key), units);
  finish(rec_, r, x);
  if (!hand_out)
    return r;
  if (x)
    push(job{chat, x->id, x->units});
  std::lock_guard<std::mutex> guard{recent_mtx_};
  recent_.push_back(r);
  if (recent_.size() > recent_max)
    recent_.pop_front();
  return r;
}

/// A reserve repeated with the request id of one a moment ago: a tap that
/// came late, or a gateway retrying after a timeout. Whether the job is
/// still active or has ended, it must name the same reservation.
void workload::retry_late(uint32_t actor, std::mt19937_64& rng) {
  op_record earlier;
  {
    std::lock_guard<std::mutex> guard{recent_mtx_};
    if (recent_.empty())
      return;
    auto last = static_cast<int64_t>(recent_.size()) - 1;
    earlier = recent_[static_cast<size_t>(uniform(rng, 0, last))];
  }
  reserve(actor, earlier.chat, earlier.job, earlier.key);
}

void workload::taps(uint32_t actor, chat_id chat, std::mt19937_64& rng) {
  // The same button pressed 2-3 times at once, usually with one request_id
  // (a retrying client), sometimes with fresh ones (a real double tap).
  auto n = uniform(rng, 2, 3);
  auto k = some_kind(rng);
  auto key = next_key();
  bool same = chance(rng) < 0.7;
  std::vector<std::thread> tappers;
  for (int64_t i = 0; i < n; ++i) {
    auto tap_key = same || i == 0 ? key : next_key();
    tappers.emplace_back(
      [this, actor, chat, k, tap_key] { reserve(actor, chat, k, tap_key); });
  }
  for (auto& t : tappers)
    t.join();
}

void workload::cancel(uint32_t actor, chat_id chat) {
  auto r = begin(op::cancel, actor, chat);
  auto x = client_.cancel(chat);
  finish(rec_, r, x);
}

/// Cancels the job a reserve asked for: by its id when the answer came, by
/// its request id when the answer was lost.
op_record workload::cancel_job(uint32_t actor, const op_record& reserved) {
  if (!reserved.ok() && !unknown(reserved))
    return reserved; // refused: there is no job to cancel
  auto r = begin(op::cancel, actor, reserved.chat, reserved.id);
  r.key = reserved.key;
  auto x = reserved.ok()
             ? client_.cancel(reserved.chat, reserved.id, "")
             : client_.cancel(reserved.chat, 0, request_id(reserved.key));
  finish(rec_, r, x);
  return r;
}

void workload::gateway(uint32_t actor, uint64_t seed) {
  std::mt19937_64 rng{seed};
  while (stop_.nap(uniform(rng, 0, 15))) {
    auto chat = pick_chat(rng);
    auto p = chance(rng);
    if (p < 0.10) {
      auto r = begin(op::touch, actor, chat);
      finish(rec_, r, client_.touch(chat));
    } else if (p < 0.20) {
      auto r = begin(op::status, actor, chat);
      finish(rec_, r, client_.status(chat));
    } else if (p < 0.50) {
      reserve(actor, chat, some_kind(rng), next_key());
    } else if (p < 0.55) {
      retry_late(actor, rng);
    } else if (p < 0.72) {
      taps(actor, chat, rng);
    } else if (p < 0.82) {
      cancel(actor, chat);
    } else {
      // Reserve, then cancel a moment later: races the worker's start, or
      // (up to a second later) finds the job started, which its kind's
      // policy refuses or turns into a request to its worker.
      auto reserved = reserve(actor, chat, paid_kind(), next_key());
      if (!stop_.nap(uniform(rng, 0, chance(rng) < 0.5 ? 300 : 1000)))
        continue;
      // A bare cancel names the chat's one job; where several may be
      // active it names the job, as a gateway must.
      if (max_active_jobs.at(chat) == 1 && chance(rng) < 0.5)
        cancel(actor, chat);
      else
        cancel_job(actor, reserved);
    }
  }
}

// -- workers ------------------------------------------------------------------

bool workload::start_job(uint32_t actor, const job& j,
                         const std::string& worker) {
  for (int i = 0; i < retries_max; ++i) {
    auto r = begin(op::start, actor, j.chat, j.id);
    r.worker = worker;
    finish(rec_, r, client_.start(j.chat, j.id, worker));
    if (r.ok())
      return true;
    if (!unknown(r) || !stop_.nap(200))
      return false; // gone, expired, cancelled, another worker's: drop it
  }
  return false;
}

void workload::commit_job(uint32_t actor, const job& j, int attempts,
                          int32_t units) {
  for (int i = 0; i < attempts; ++i) {
    auto r = begin(op::commit, actor, j.chat, j.id);
    r.units = units;
    finish(rec_, r, commit_units(client_, j.chat, j.id, units));
    if (!unknown(r))
      return;
    if (!stop_.nap(200))
      return;
  }
}

void workload::fail_job(uint32_t actor, const job& j) {
  for (int i = 0; i < retries_max; ++i) {
    auto r = begin(op::fail, actor, j.chat, j.id);
    finish(rec_, r, client_.fail(j.chat, j.id));
    if (!unknown(r) || !stop_.nap(200))
      break;
  }
}

/// The user cancelled the started job (a heartbeat said so): the worker
/// aborts (nothing charged), or the provider had done the work and it
/// commits, or it stopped half-way and commits one unit.
void workload::honour_cancel(uint32_t actor, const job& j,
                             std::mt19937_64& rng) {
  auto p = chance(rng);
  if (p < 0.5)
    fail_job(actor, j);
  else if (p < 0.8)
    commit_job(actor, j, retries_max, 0);
  else
    commit_job(actor, j, retries_max, 1);
}

/// One job, as the worker's fate has it. `heartbeats` beats `n` times,
/// `gap_ms` apart, and is true once one answered cancel_requested.
void workload::run_job(uint32_t actor, const job& j, std::mt19937_64& rng) {
  auto heartbeats = [&](int64_t n, int64_t gap_ms) {
    for (int64_t i = 0; i < n && stop_.nap(gap_ms); ++i) {
      auto r = begin(op::heartbeat, actor, j.chat, j.id);
      finish(rec_, r, client_.heartbeat(j.chat, j.id));
      if (r.ok() && r.cancel_requested)
        return true;
    }
    return false;
  };
  auto p = chance(rng);
  if (p < 0.05)
    return; // died before it started the job
  // Its identity for this attempt, as a queue job id and attempt would be.
  auto worker = "w" + std::to_string(actor) + "-" + std::to_string(j.id);
  if (!start_job(actor, j, worker))
    return;
  if (chance(rng) < 0.05)
    // The queue delivered the job twice: the other delivery's worker must
    // be refused (already_started) and walks away.
    start_job(actor, j, worker + "-again");
  if (p < 0.10) { // the provider timed out: nobody knows what it did
    heartbeats(uniform(rng, 0, 1), uniform(rng, 50, 300));
    job_uncertain(actor, j, rng);
    return;
  }
  if (p < 0.60) { // finishes: commit (sometimes twice, as a retry would)
    if (heartbeats(uniform(rng, 0, 3), uniform(rng, 50, 500))) {
      honour_cancel(actor, j, rng);
      return;
    }
    // Half the jobs of several units cost fewer than were held.
    int32_t units = j.units > 1 && chance(rng) < 0.5
                      ? static_cast<int32_t>(uniform(rng, 1, j.units))
                      : 0;
    commit_job(actor, j, retries_max, units);
    if (chance(rng) < 0.1)
      commit_job(actor, j, 1, units);
  } else if (p < 0.75) { // the job failed
    heartbeats(uniform(rng, 0, 1), uniform(rng, 50, 300));
    fail_job(actor, j);
  } else if (p < 0.83) { // hangs: heartbeats, then goes quiet (lease lapses)
    heartbeats(uniform(rng, 1, 3), uniform(rng, 100, 500));
  } else if (p < 0.90) { // dies silently: no heartbeat at all
    return;
  } else { // comes back late, after a sweep released the job
    heartbeats(uniform(rng, 0, 1), 100);
    if (!stop_.nap(opts_.late_ms))
      return;
    auto r = begin(op::heartbeat, actor, j.chat, j.id);
    finish(rec_, r, client_.heartbeat(j.chat, j.id));
    commit_job(actor, j, 1);
  }
}

void workload::worker(uint32_t actor, uint64_t seed) {
  std::mt19937_64 rng{seed};
  while (!stop_.raised()) {
    job j;
    if (pop(j))
      run_job(actor, j, rng);
  }
}

// -- outcome unknown
// ------------------------------------------------------------

void workload::job_uncertain(uint32_t actor, const job& j,
                             std::mt19937_64& rng) {
  auto ref = "prov-" + std::to_string(opts_.seed) + "-" + std::to_string(j.id);
  for (int i = 0; i < retries_max; ++i) {
    auto r = begin(op::uncertain, actor, j.chat, j.id);
    finish(rec_, r, client_.uncertain(j.chat, j.id, ref));
    if (r.ok())
      break;
    if (!unknown(r) || !stop_.nap(200))
      return;
  }
  // A commit retry of the worker's own that was still under way: refused.
  if (chance(rng) < 0.2)
    commit_job(actor, j, 1);
  // Two in three are resolved, some after reconcile-timeout (expired); the
  // rest stay unresolved until the sweep releases them.
  if (chance(rng) < 0.67) {
    std::lock_guard<std::mutex> guard{reconcile_mtx_};
    reconcile_.push_back({j, now_us() + uniform(rng, 0, 8000) * 1000});
  }
}

op_record workload::resolve(uint32_t actor, const job& j,
                            const std::string& outcome, int32_t units) {
  op_record r;
  for (int i = 0; i < retries_max; ++i) {
    r = begin(op::resolve, actor, j.chat, j.id);
    r.resolution = outcome;
    r.units = units;
    finish(rec_, r, resolve_units(client_, j.chat, j.id, outcome, units));
    if (!unknown(r) || !stop_.nap(200))
      break;
  }
  return r;
}

namespace {

bool refused(const op_record& r) {
  return r.result == static_cast<uint8_t>(ec::invalid_state);
}

} // namespace

/// Asks "the provider" (a coin) about each uncertain job when it is due,
/// and resolves it: succeeded (all or fewer units), failed, twice, or by
/// two reconcilers that disagree at once. Also pages through `unresolved`,
/// as a reconciler that was down would.
void workload::reconciler(uint32_t actor, uint64_t seed) {
  std::mt19937_64 rng{seed};
  while (stop_.nap(uniform(rng, 50, 200))) {
    if (chance(rng) < 0.05) {
      auto page = client_.unresolved(0, 1000);
      if (!page)
        spdlog::debug("chaos: unresolved failed error={}",
                      error_name(page.error()));
    }
    to_reconcile next;
    {
      std::lock_guard<std::mutex> guard{reconcile_mtx_};
      if (reconcile_.empty() || reconcile_.front().due_us > now_us())
        continue;
      next = reconcile_.front();
      reconcile_.pop_front();
    }
    const auto& j = next.of;
    auto units = j.units > 1 && chance(rng) < 0.5
                   ? static_cast<int32_t>(uniform(rng, 1, j.units))
                   : 0;
    auto p = disagreed_ ? chance(rng) : 1.0;
    if (p < 0.4) {
      resolve(actor, j, "succeeded", units);
    } else if (p < 0.7) {
      resolve(actor, j, "failed", 0);
    } else if (p < 0.85) {
      resolve(actor, j, "succeeded", units);
      resolve(actor, j, "succeeded", units);
    } else {
      op_record failed;
      std::thread other{[this, actor, j, &failed] {
        failed = resolve(actor, j, "failed", 0);
      }};
      auto succeeded = resolve(actor, j, "succeeded", units);
      other.join();
      if (refused(failed) || refused(succeeded))
        disagreed_ = true;
    }
  }
}

// -- admin --------------------------------------------------------------------

void workload::top_up(uint32_t actor, chat_id chat, int64_t credits,
                      uint64_t pay, std::mt19937_64& rng) {
  auto payment =
    "pay-" + std::to_string(opts_.seed) + "-" + std::to_string(pay);
  for (int i = 0; i < retries_max; ++i) {
    auto r = begin(op::top_up, actor, chat);
    r.key = pay;
    r.credits = static_cast<int32_t>(credits);
    finish(rec_, r, client_.top_up(chat, credits, payment));
    // A webhook is retried after an unknown outcome, and sometimes anyway.
    if (!unknown(r) && chance(rng) > 0.2)
      return;
    if (!stop_.nap(100))
      return;
  }
}

void workload::admin(uint32_t actor, uint64_t seed) {
  std::mt19937_64 rng{seed};
  while (stop_.nap(uniform(rng, 20, 120))) {
    auto chat = pick_chat(rng);
    auto p = chance(rng);
    if (p < 0.55) {
      top_up(actor, chat, uniform(rng, 1, 5), next_key(), rng);
    } else if (p < 0.67) {
      some_grant(actor, rng);
    } else if (p < 0.72) {
      void_some_grant(actor, rng);
    } else {
      // Premium that lapsed an hour ago up to premium for another hour.
      auto until =
        caf::make_timestamp() + std::chrono::minutes(uniform(rng, -60, 60));
      auto r = begin(op::premium, actor, chat);
      finish(rec_, r, client_.set_premium(chat, until));
    }
  }
}

// -- grants -------------------------------------------------------------------

op_record workload::grant_top_up(uint32_t actor, chat_id chat, int64_t credits,
                                 uint64_t pay, const grant_terms& terms,
                                 bool remember, std::mt19937_64& rng) {
  auto payment =
    "pay-" + std::to_string(opts_.seed) + "-" + std::to_string(pay);
  op_record r;
  for (int i = 0; i < retries_max; ++i) {
    r = begin(op::top_up, actor, chat);
    r.key = pay;
    r.credits = static_cast<int32_t>(credits);
    finish(rec_, r, client_.top_up(chat, credits, payment, terms));
    if (r.ok() && remember) {
      std::lock_guard<std::mutex> guard{granted_mtx_};
      granted_.push_back({chat, r.grant, pay});
      if (granted_.size() > granted_max)
        granted_.pop_front();
    }
    // A webhook is retried after an unknown outcome, and sometimes anyway.
    if (!unknown(r) && chance(rng) > 0.2)
      break;
    if (!stop_.nap(100))
      break;
  }
  return r;
}

void workload::some_grant(uint32_t actor, std::mt19937_64& rng) {
  auto share = std::max<int64_t>(1, opts_.chats / grant_chat_every);
  auto chat =
    opts_.first_chat
    + std::min(opts_.chats, grant_chat_every * uniform(rng, 1, share));
  grant_terms terms;
  auto in_ms = uniform(rng, grant_expiry_ms_min, grant_expiry_ms_max);
  // Some give the instant, as a webhook that computed it would.
  if (chance(rng) < 0.2)
    terms.expires_at = caf::make_timestamp() + std::chrono::milliseconds(in_ms);
  else
    terms.expires_in_ms = in_ms;
  terms.priority = grant_priorities[uniform(rng, 0, 3)];
  terms.source = grant_sources[uniform(rng, 0, 2)];
  grant_top_up(actor, chat, uniform(rng, 1, 6), next_key(), terms, true, rng);
}

op_record workload::void_grant(uint32_t actor, const granted& g,
                               bool by_payment, std::mt19937_64& rng) {
  auto payment =
    "pay-" + std::to_string(opts_.seed) + "-" + std::to_string(g.pay);
  op_record r;
  for (int i = 0; i < retries_max; ++i) {
    r = begin(op::void_grant, actor, g.chat);
    r.key = g.pay;
    r.grant = by_payment ? 0 : g.grant;
    finish(rec_, r,
           client_.void_grant(g.chat, by_payment ? 0 : g.grant,
                              by_payment ? payment : std::string{}));
    if (!unknown(r) && chance(rng) > 0.2)
      break;
    if (!stop_.nap(100))
      break;
  }
  return r;
}

void workload::void_some_grant(uint32_t actor, std::mt19937_64& rng) {
  granted g;
  {
    std::lock_guard<std::mutex> guard{granted_mtx_};
    if (granted_.empty())
      return;
    auto last = static_cast<int64_t>(granted_.size()) - 1;
    g = granted_[static_cast<size_t>(uniform(rng, 0, last))];
  }
  void_grant(actor, g, chance(rng) < 0.5, rng);
}

const kind_spec* workload::balance_kind() const {
  for (const auto& k : opts_.products.kinds)
    for (const auto& source : k.pay_from)
      if (source.pocket == pocket::balance)
        return &k;
  return nullptr;
}

void workload::plant_grants() {
  const auto* k = balance_kind();
  if (k == nullptr)
    return; // a catalog whose kinds never pay from the balance
  auto chat = grant_chat_;
  // Units enough to take every daily unit a refill may have given first,
  // then 6 credits of the balance: the promo's 3, the early grant's 2, and
  // one of create-chat's grant.
  int32_t units = 0;
  int32_t balance_price = 1;
  for (const auto& source : k->pay_from) {
    if (source.pocket == pocket::balance) {
      balance_price = source.price;
      break;
    }
    if (const auto* p = opts_.products.find_pocket(source.pocket))
      units += p->free_daily / source.price;
  }
  units += (6 + balance_price - 1) / balance_price;
  std::mt19937_64 rng{opts_.seed * 7919 + 3};
  auto terms = [](int32_t priority, const char* source) {
    grant_terms t;
    t.priority = priority;
    t.source = source;
    return t;
  };
  auto promo_terms = terms(10, "promo");
  promo_terms.expires_in_ms = planted_expiry.count();
  // Not remembered for the admin's voids: the hold must find them as
  // planted. Each repeat keeps its payment id.
  auto top_up = [&](int32_t credits, const grant_terms& t) {
    auto pay = next_key();
    return definite(
      [&] { return grant_top_up(0, chat, credits, pay, t, false, rng); });
  };
  auto promo = top_up(3, promo_terms);
  auto promo_acked_ms = now_us() / 1000;
  auto early = top_up(2, terms(20, "promo"));
  auto gone = top_up(2, terms(5, "purchase"));
  if (!promo.ok() || !early.ok() || !gone.ok()) {
    spdlog::warn("chaos: plant_grants: a top-up was refused: {} {} {}",
                 outcome_name(promo.result), outcome_name(early.result),
                 outcome_name(gone.result));
    return;
  }
  // The earliest grant of all, voided before the hold: it gives nothing.
  granted voided{chat, gone.grant, gone.key};
  if (!definite([&] { return void_grant(0, voided, true, rng); }).ok()
      || !definite([&] { return void_grant(0, voided, false, rng); }).ok())
    return;
  auto key = next_key();
  auto held = definite(
    [&] { return reserve(0, chat, kind{k->name}, key, units, false); });
  if (!held.ok())
    return;
  auto ask = [&](op what, auto&& send) {
    return definite([&] { return once(what, chat, held.id, send); }).ok();
  };
  if (!ask(op::start, [&] { return client_.start(chat, held.id); }))
    return;
  // The promo expires while the job holds it; the job beats meanwhile.
  auto expired =
    std::chrono::system_clock::time_point{
      std::chrono::milliseconds(promo_acked_ms)}
    + planted_expiry + std::chrono::milliseconds(300);
  while (std::chrono::system_clock::now() < expired) {
    std::this_thread::sleep_for(planted_heartbeat);
    if (!ask(op::heartbeat, [&] { return client_.heartbeat(chat, held.id); }))
      return;
  }
  // One unit: what it costs comes of the promo's held credits, the rest of
  // them expires as the hold ends, the other grants' return.
  definite([&] {
    auto r = begin(op::commit, 0, chat, held.id);
    r.units = 1;
    finish(rec_, r, client_.commit(chat, held.id, 1));
    return r;
  });
}

} // namespace chargeonce::chaos
