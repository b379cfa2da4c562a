// SPDX-License-Identifier: Apache-2.0
// The driver's machinery: setup, the randomized scheduler and clock, the
// client actors, the run and the final drain. The steps are in steps.cpp.
#include "tests/simulation/driver.hpp"

#include "protocol/errors.hpp"
#include "tests/simulation/persistence.hpp"

#include <algorithm>

namespace chargeonce::test {

using namespace std::chrono_literals;

namespace {

/// A gateway: answers each durable event at once and remembers it.
caf::behavior event_log(caf::event_based_actor*,
                        std::shared_ptr<std::vector<event_record>> heard,
                        std::shared_ptr<std::string> cut_off) {
  return {
    [heard](const reservation_released& x) {
      heard->push_back(
        {x.id, "reservation_released", x.chat, x.reservation, x.reason});
    },
    [heard](const cancel_requested& x) {
      heard->push_back({x.id, "cancel_requested", x.chat, x.reservation, ""});
    },
    [heard](const reconcile_needed& x) {
      heard->push_back(
        {x.id, "reconcile_needed", x.chat, x.reservation, x.provider_ref});
    },
    [heard](const limits_refilled& x) {
      heard->push_back({x.id, "limits_refilled", x.chat, 0, ""});
    },
    [](const queue_notice&) {},
    [cut_off](const subscription_ended& x) { *cut_off = x.reason; },
  };
}

} // namespace

simulation::simulation(uint64_t seed, sim_mutant mutant,
                       caf::exit_reason chat_kill_reason, catalog products)
    : rng_(seed), kill_reason_(chat_kill_reason) {
  world->rng.seed(seed * 7919 + 1);
  world->products = std::move(products);
  world->reconcile_timeout = 40s;
  // Each kind refuses a cancel after start, or asks the worker to stop:
  // seeded apart from rng_, so the steps' choices do not shift with it.
  std::mt19937_64 policies{seed * 31 + 3};
  for (auto& k : world->products.kinds)
    if (policies() % 2 == 0)
      k.cancel_after_start = cancel_policy::request;
  world->mutant = mutant;
  options_.connections = 2;
  options_.sweep_interval = 10s;
  options_.reactivation_interval = 15s;
  options_.chat = chat_options{5s, 3s, 2s}; // short idle: passivation races
  // The bus also reads at once when a release, a cancel request or a
  // refill happens here; a slower tick keeps the simulated clock's steps
  // few.
  options_.events.poll_interval = 1s;
  world->stall_max = 2 * options_.chat.store_timeout;
  world->store_timeout = options_.chat.store_timeout;
  auditor.sweep_interval = options_.sweep_interval;
  auditor.store_timeout = options_.chat.store_timeout;
  auto factory = [this] {
    auto member = spawn_sim_persistence(sys, world);
    members_.push_back(caf::actor_cast<caf::actor>(member));
    return member;
  };
  root_ = sys.spawn(make_supervisor, factory, options_);
  sched.run();
  auto rh = self->request(root_, caf::infinite, atom::api_v);
  sched.run();
  api_ = caf::actor_cast<caf::actor>(*receive<api_actor>(rh));
}

simulation::~simulation() {
  caf::anon_send_exit(gateway_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(root_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(fake_actor, caf::exit_reason::user_shutdown);
  for (auto& m : members_)
    caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
  for (auto& c : clients_)
    caf::anon_send_exit(c, caf::exit_reason::user_shutdown);
  // Chat actors awaiting an answer take the exit after their timeout.
  for (int i = 0; i < 100; ++i) {
    sched.run();
    if (!sched.has_pending_timeout())
      break;
    sched.trigger_timeouts();
  }
}

// -- scheduler and clock ------------------------------------------------------

caf::timestamp simulation::now() {
  return caf::timestamp{std::chrono::duration_cast<caf::timespan>(
    sched.clock().now().time_since_epoch())};
}

/// Runs every actor that has mail, in an order the seed picks, then acts
/// on the answers, until nothing moves without the clock.
void simulation::settle() {
  for (;;) {
    while (sched.has_job()) {
      auto& jobs = sched.jobs;
      auto i = static_cast<long>(rng_() % jobs.size());
      std::rotate(jobs.begin(), jobs.begin() + i, jobs.begin() + i + 1);
      sched.run_once();
    }
    if (completed_.empty())
      return;
    auto answers = std::move(completed_);
    completed_.clear();
    for (auto& f : answers)
      f();
  }
}

/// Timer by timer, so that periodic timers (the sweep tick) keep their
/// cadence however far the clock jumps.
void simulation::pass_time_until(caf::timestamp t) {
  for (int guard = 0; guard < 100000; ++guard) {
    settle();
    auto target = t;
    const auto& timers = sched.clock().schedule();
    if (!timers.empty()) {
      auto next = caf::timestamp{std::chrono::duration_cast<caf::timespan>(
        timers.begin()->first.time_since_epoch())};
      target = std::min(target, next);
    }
    sched.advance_time(std::max(target - now(), caf::timespan{0}));
    if (target == t)
      return;
  }
  auditor.flag("the clock does not advance: a timer loop");
}

void simulation::pass_time(caf::timespan d) {
  pass_time_until(now() + d);
  settle();
}

// -- requests -----------------------------------------------------------------

namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

} // namespace

void simulation::issue_reserve(chat_id c, kind k, const std::string& rid) {
  // A third of the jobs may cost up to 4 units.
  int32_t units = pick(3) == 0 ? 1 + pick(4) : 0;
  std::function<void(caf::expected<reservation>&)> answered =
    [this, c](caf::expected<reservation>& r) {
      if (r && r->units > 1)
        ++stats["reserves_of_units"];
      if (r && jobs_.count(r->id) == 0 && pick(4) != 0) { // job is queued
        sim_job j;
        j.chat = c;
        j.id = r->id;
        j.heartbeats = pick(2) == 0;
        j.fate = pick(12);
        auto roll = pick(8);
        if (roll == 0)
          j.commit_units = r->units + 1;
        else if (roll < 4)
          j.commit_units = 1 + pick(r->units);
        j.worker = "worker-" + str(r->id);
        jobs_[r->id] = j;
      }
    };
  // Units 0: not named, one unit (an explicit 0 is invalid_argument).
  if (units == 0)
    call<reservation>("reserve(" + str(c) + ")", c, answered, atom::reserve_v,
                      c, k, rid);
  else
    call<reservation>("reserve(" + str(c) + ")", c, answered, atom::reserve_v,
                      c, k, rid, units);
}

void simulation::issue_start(reservation_id id, const std::string& who) {
  auto c = jobs_[id].chat;
  bool own = who == jobs_[id].worker;
  call<reservation>(
    "start(" + str(id) + (own ? "" : ",again") + ")", c,
    [this, id, c, who, own](caf::expected<reservation>& r) {
      if (r) {
        acks_.started_ok.insert(id);
        auditor.on_start(acks_, id, who);
        if (auto j = jobs_.find(id); j != jobs_.end() && own)
          j->second.started = true;
      } else if (r.error() == ec::already_started) {
        // The other delivery runs it: this worker walks away.
        ++stats[own ? "first_delivery_overtaken" : "second_delivery_refused"];
        if (own)
          jobs_.erase(id);
      } else if (!own) {
        // A second delivery that finds the job gone or ended does nothing.
      } else if (!sim_unknown_outcome(r.error())) {
        // Cancelled, released or gone: the worker moves on; a buggy one
        // commits anyway, which must be refused.
        if (r.error() == ec::not_found && pick(8) == 0)
          stale_commit(id, c);
        jobs_.erase(id);
      }
    },
    atom::start_v, c, id, who);
}

void simulation::stale_commit(reservation_id id, chat_id c) {
  ++stats["commit_after_not_found"];
  acks_.commit_requested.insert(id);
  acks_.commit_units.emplace(id, 0);
  call<receipt>(
    "stale-commit(" + str(id) + ")", c,
    [this](caf::expected<receipt>& x) {
      if (x)
        auditor.on_receipt(*world, acks_, *x);
    },
    atom::commit_v, c, id);
}

void simulation::issue_commit(reservation_id id) {
  auto c = jobs_[id].chat;
  auto units = jobs_[id].commit_units;
  acks_.commit_requested.insert(id);
  acks_.commit_units.emplace(id, units);
  auto answered = [this, id](caf::expected<receipt>& x) {
    if (x)
      auditor.on_receipt(*world, acks_, *x);
    if (x && x->released != pockets{})
      ++stats["partial_commits"];
    if (!x && x.error() == ec::invalid_argument)
      ++stats["commits_of_too_many_units"];
    if (x || !sim_unknown_outcome(x.error()))
      jobs_.erase(id); // else the worker retries the commit later
  };
  // Units 0: not named, the whole hold (an explicit 0 is invalid_argument).
  if (units == 0)
    call<receipt>("commit(" + str(id) + ")", c, answered, atom::commit_v, c,
                  id);
  else
    call<receipt>("commit(" + str(id) + ")", c, answered, atom::commit_v, c, id,
                  units);
}

// -- the run ------------------------------------------------------------------

int simulation::pick(int n) {
  return static_cast<int>(rng_() % static_cast<uint64_t>(n));
}

chat_id simulation::some_chat() {
  return 1 + pick(chats_per_run);
}

kind simulation::first_kind() const {
  return kind{world->products.kinds.front().name};
}

kind simulation::last_kind() const {
  return kind{world->products.kinds.back().name};
}

void simulation::setup() {
  static constexpr int rates[] = {2, 5, 10, 20}; // calm to stormy seeds
  // Subscribed before anything happens, after id 0: it must hear every
  // durable event of the run, in id order.
  gateway_ = sys.spawn(event_log, heard_, cut_off_);
  auto subscribed = self->request(api_, caf::infinite, atom::subscribe_v,
                                  gateway_, event_id{0});
  settle();
  if (auto ok = receive<bool>(subscribed); !ok || !*ok)
    auditor.flag("the gateway could not subscribe");
  for (chat_id c = 1; c <= chats_per_run; ++c) {
    // Empty, one job's price, a few: daily pockets 0 to 1 + the highest
    // price, balance one more (for the built-in catalog 0-2, 0-2, 0-3).
    pockets p;
    for (const auto& spec : world->products.pockets) {
      int32_t price = 1;
      for (const auto& k : world->products.kinds)
        for (const auto& source : k.pay_from)
          if (source.pocket == spec.name)
            price = std::max(price, source.price);
      p.set(spec.name, pick(2 + price + (spec.purchased ? 1 : 0)));
    }
    acks_.initial[c] = p;
    // Mixed limits: the plan's (1), or the chat's own 1, 2 or 4 jobs.
    static constexpr int32_t limits[] = {0, 1, 2, 4};
    auto limit = limits[pick(4)];
    auto own = limit == 0 ? caf::optional<int32_t>{} : limit;
    call<chat_status>(
      "create(" + str(c) + ")", c,
      [this](caf::expected<chat_status>& x) {
        if (!x && x.error() != caf::sec::request_timeout)
          auditor.flag("setup failed: " + error_name(x.error()));
      },
      atom::create_v, chat_spec{c, p, caf::none, own});
  }
  // The planted straddling job's chat: its daily pockets pay one unit of
  // the last kind paid first from a daily pocket (image when built in),
  // and nothing else; its window opens now (straddle()).
  for (const auto& k : world->products.kinds)
    if (!k.pay_from.empty() && k.pay_from.front().pocket != pocket::balance)
      straddle_kind_ = k.name;
  if (!straddle_kind_.empty()) {
    pockets p;
    for (const auto& spec : world->products.pockets)
      p.set(spec.name, 0);
    const auto& first =
      world->products.find_kind(straddle_kind_)->pay_from.front();
    p.set(first.pocket, first.price);
    acks_.initial[straddle_chat] = p;
    call<chat_status>(
      "create(" + str(straddle_chat) + ")", straddle_chat,
      [this](caf::expected<chat_status>& x) {
        if (!x && x.error() != caf::sec::request_timeout)
          auditor.flag("setup failed: " + error_name(x.error()));
      },
      atom::create_v,
      chat_spec{straddle_chat, p, caf::none, caf::optional<int32_t>{}});
  }
  create_grant_chat();
  settle();
  if (!straddle_kind_.empty()) {
    ask<chat_status>("touch(" + str(straddle_chat) + ")", straddle_chat,
                     atom::touch_v, straddle_chat);
    settle();
  }
  world->fault_percent = rates[pick(4)];
  trail << "\n fault_percent=" << world->fault_percent;
}

std::string simulation::run() {
  setup();
  for (int i = 0; i < steps_per_run && auditor.violation.empty(); ++i) {
    trail << "\n [" << i << " t="
          << std::chrono::duration_cast<std::chrono::milliseconds>(
               now().time_since_epoch())
               .count()
          << "ms]";
    if (i == grant_step)
      plant_grants();
    step();
    auditor.audit(*world, acks_, now());
  }
  if (auditor.violation.empty())
    straddle(true); // the run was too short for its window to turn
  if (auditor.violation.empty())
    drain();
  auditor.audit(*world, acks_, now());
  stats["refills"] += world->refills;
  stats["sweep_releases"] += world->released.size();
  for (const auto& [id, x] : world->resolved)
    if (x.outcome == "released")
      ++stats["unresolved_releases"];
  stats["requests"] += calls_.size();
  stats["grants"] += world->grants.size();
  stats["grants_expired_while_held"] += world->expired_while_held;
  stats["grants_voided_while_held"] += world->voided_while_held;
  for (const auto& [id, g] : world->grants) {
    stats["grants_expired"] += g.expired_at ? 1 : 0;
    stats["grants_voided"] += g.voided_at ? 1 : 0;
  }
  for (const auto& l : world->history)
    if ((l.entry == "expire" || l.entry == "void") && l.reservation != 0)
      ++stats[l.entry == "expire" ? "held_credits_expired_at_hold_end"
                                  : "held_credits_voided_at_hold_end"];
  for (const auto& [id, m] : world->made_with)
    stats["holds_on_several_grants"] += m.grants.size() > 1 ? 1 : 0;
  stats["events_written"] += world->events.size();
  stats["events_heard"] += heard_->size();
  return auditor.violation;
}

/// Invariant 4 at the end, and every request answered: faults off, workers
/// quiet, long enough for every stall, restart and sweep to end.
void simulation::drain() {
  trail << "\n [drain]";
  world->fault_percent = 0;
  world->stall_next = 0;
  jobs_.clear();
  pass_time(std::max(world->sweep_timeout, world->reconcile_timeout)
            + 2 * options_.sweep_interval + 2 * world->stall_max
            + options_.restart_backoff_max);
  auditor.audit_drained(*world);
  auditor.audit_grants_drained(*world, now());
  auditor.audit_events(*world, *heard_, *cut_off_);
  for (const auto& c : calls_)
    if (!c->done)
      auditor.flag("request never answered: " + c->what);
}

} // namespace chargeonce::test
