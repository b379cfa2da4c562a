// SPDX-License-Identifier: Apache-2.0
// The simulation's steps: what users, workers and admins do, and the faults
// injected between and during their requests.
#include "tests/simulation/driver.hpp"

namespace chargeonce::test {

using namespace std::chrono_literals;

namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

bool terminated(const caf::actor& x) {
  return caf::actor_cast<caf::abstract_actor*>(x)->getf(
    caf::abstract_actor::is_terminated_flag);
}

/// How long before its window turns the planted straddling job is
/// reserved: well within sweep-timeout, so it is still open at the turn.
constexpr auto straddle_lead = std::chrono::seconds(5);

} // namespace

void simulation::step() {
  late_workers_return();
  straddle(false);
  auto roll = pick(100);
  if (roll < 16)
    user_taps();
  else if (roll < 20)
    user_cancels(false);
  else if (roll < 26)
    user_cancels(true);
  else if (roll < 50)
    worker_acts();
  else if (roll < 60)
    admin_acts();
  else if (roll < 64)
    outage();
  else if (roll < 67)
    kill_persistence();
  else if (roll < 71)
    kill_chat(true);
  else if (roll < 73)
    kill_chat(false);
  else if (roll < 78)
    passivation_race();
  else if (roll < 82)
    reconciler_acts();
  else { // time passes: leases lapse, sweeps, refills and passivations run
    trail << " time";
    pass_time(std::chrono::milliseconds(500 + pick(7500)));
  }
}

// -- users --------------------------------------------------------------------

/// A single, double or triple tap: the same request several times before
/// anything ran, racing in the actors (with one request_id or none).
void simulation::user_taps() {
  auto c = some_chat();
  auto taps = 1 + pick(3);
  ++stats[taps == 1 ? "tap" : taps == 2 ? "double_tap" : "triple_tap"];
  const auto& kinds = world->products.kinds;
  auto k = kind{kinds[pick(static_cast<int>(kinds.size()))].name};
  // A chat that runs several jobs at once names each (without, it would
  // be invalid_argument); one that runs one at a time sometimes does not.
  // Sometimes the tap repeats an earlier request of the chat: a late
  // second tap after its job may have ended.
  auto parallel = world->chats[c].max_active_jobs.value_or(1) > 1;
  std::string rid;
  if (parallel || pick(2) == 0)
    rid = pick(4) == 0 ? "tap-" + str(c) + "-" + str(pick(3))
                       : "tap-" + str(pick(1 << 30));
  for (int i = 0; i < taps; ++i)
    issue_reserve(c, k, rid);
  settle();
}

/// A cancel at a random moment; or exactly while a worker starts the job.
void simulation::user_cancels(bool race_start) {
  chat_id c = some_chat();
  reservation_id raced = 0;
  if (race_start) {
    std::vector<reservation_id> queued;
    for (const auto& [id, j] : jobs_)
      if (!j.started)
        queued.push_back(id);
    if (queued.empty())
      return;
    auto id =
      queued[static_cast<size_t>(pick(static_cast<int>(queued.size())))];
    c = jobs_[id].chat;
    raced = id;
    ++stats["cancel_racing_start"];
    issue_start(id, jobs_[id].worker); // the seed decides who comes first
  }
  auto record = [this](caf::expected<reservation>& r) {
    if (!r)
      return;
    if (!r->cancel_requested) {
      acks_.cancelled_ok.insert(r->id);
      return;
    }
    ++stats["cancel_requested"];
    acks_.cancel_requested_ok.insert(r->id);
    if (r->status != reservation_status::in_progress)
      auditor.flag("cancel answered cancel_requested for " + str(r->id)
                   + " not in progress");
  };
  // With several jobs a bare cancel names none: cancel one by its id, a
  // queued one or, half the time, any (a started one under the `request`
  // policy asks its worker to stop). A chat with one job at a time is
  // cancelled bare, as before.
  auto parallel = world->chats[c].max_active_jobs.value_or(1) > 1;
  reservation_id named = parallel ? raced : 0;
  bool any = pick(2) == 0;
  if (parallel && named == 0)
    for (const auto& [id, j] : jobs_)
      if (j.chat == c && (any || !j.started))
        named = id;
  if (named == 0)
    call<reservation>("cancel(" + str(c) + ")", c, record, atom::cancel_v, c);
  else
    call<reservation>("cancel(" + str(c) + "," + str(named) + ")", c, record,
                      atom::cancel_v, c, named, std::string{});
  settle();
}

// -- workers ------------------------------------------------------------------

/// One move of a random worker, by its fate: 0-4 finish, 5 fail, 6 hang,
/// 7 die silently, 8 come back late after a sweep, 9 finish twice (a retry
/// racing the first commit).
void simulation::worker_acts() {
  std::vector<reservation_id> awake;
  for (const auto& [id, j] : jobs_)
    if (j.back_at == caf::timestamp{})
      awake.push_back(id);
  if (awake.empty())
    return;
  auto id = awake[static_cast<size_t>(pick(static_cast<int>(awake.size())))];
  auto& j = jobs_[id];
  if (!j.started) {
    auto who = j.worker;
    issue_start(id, who);
    if (pick(5) == 0) {
      issue_start(id, who); // the worker's retry overtakes its first try
    } else if (pick(6) == 0) {
      // The queue delivers the job twice: another worker starts it too.
      ++stats["delivered_twice"];
      issue_start(id, who + "-again");
    }
    settle();
    return;
  }
  if (j.cancel_seen) {
    worker_honours_cancel(id);
    settle();
    return;
  }
  if (j.heartbeats && pick(2) == 0) {
    // The worker reads the heartbeat's answer before it goes on.
    call<reservation>(
      "heartbeat(" + str(id) + ")", j.chat,
      [this, id](caf::expected<reservation>& r) {
        auto job = jobs_.find(id);
        if (r && r->cancel_requested && job != jobs_.end())
          job->second.cancel_seen = true;
      },
      atom::heartbeat_v, j.chat, id);
    settle();
    auto job = jobs_.find(id);
    if (job == jobs_.end() || job->second.back_at != caf::timestamp{})
      return;
    if (job->second.cancel_seen) {
      worker_honours_cancel(id);
      settle();
      return;
    }
  }
  switch (j.fate) {
  case 5:
    ask<reservation>("fail(" + str(id) + ")", j.chat, atom::fail_v, j.chat, id);
    jobs_.erase(id);
    break;
  case 6: // hangs: the lease or the age limit frees the chat
    ++stats["worker_hangs"];
    break;
  case 7:
    ++stats["worker_dies"];
    jobs_.erase(id);
    break;
  case 8:
    ++stats["worker_away"];
    j.back_at = now() + world->sweep_timeout + std::chrono::seconds(pick(20));
    break;
  case 9:
    issue_commit(id);
    issue_commit(id);
    break;
  case 10:
  case 11:
    worker_uncertain(id);
    break;
  default:
    issue_commit(id);
    break;
  }
  settle();
}

void simulation::worker_honours_cancel(reservation_id id) {
  auto& j = jobs_[id];
  switch (pick(3)) {
  case 0: // aborts: nothing charged
    ++stats["aborted_on_cancel_request"];
    ask<reservation>("fail(" + str(id) + ")", j.chat, atom::fail_v, j.chat, id);
    jobs_.erase(id);
    break;
  case 1: // the provider had done the work
    ++stats["committed_after_cancel_request"];
    issue_commit(id);
    break;
  default: // stopped half-way: one unit
    ++stats["partial_after_cancel_request"];
    j.commit_units = 1;
    issue_commit(id);
    break;
  }
}

void simulation::worker_uncertain(reservation_id id) {
  auto& j = jobs_[id];
  ++stats["provider_timeouts"];
  auto resolves = j.fate == 10;
  auto units = j.commit_units;
  call<reservation>(
    "uncertain(" + str(id) + ")", j.chat,
    [this, id, resolves, units](caf::expected<reservation>& r) {
      auto job = jobs_.find(id);
      if (!r && sim_unknown_outcome(r.error()))
        return; // the worker tries again on its next move
      if (r) {
        acks_.uncertain_ok.insert(id);
        if (r->status != reservation_status::outcome_unknown)
          auditor.flag("uncertain answered " + std::string{to_string(r->status)}
                       + " for " + str(id));
        if (resolves && job != jobs_.end())
          to_resolve_[id] = {job->second.chat, units};
        // Sometimes the worker's own commit retry was still on its way.
        if (job != jobs_.end() && pick(4) == 0) {
          ++stats["stale_commit_after_uncertain"];
          issue_commit(id);
        }
      }
      jobs_.erase(id);
    },
    atom::uncertain_v, j.chat, id, "prov-" + str(id));
}

void simulation::reconciler_acts() {
  if (to_resolve_.empty())
    return;
  auto i = to_resolve_.begin();
  std::advance(i, pick(static_cast<int>(to_resolve_.size())));
  auto id = i->first;
  auto [chat, units] = i->second;
  auto resolve = [this, id, chat, units](const std::string& outcome) {
    if (outcome == "succeeded") {
      acks_.resolve_succeeded_requested.insert(id);
      acks_.commit_requested.insert(id);
      acks_.commit_units.emplace(id, units);
    }
    auto answered = [this, id](caf::expected<resolution>& x) {
      if (x) {
        ++stats[x->outcome == "succeeded" ? "resolved_succeeded"
                                          : "resolved_failed"];
        auditor.on_resolution(*world, acks_, *x);
      }
      if (x || !sim_unknown_outcome(x.error()))
        to_resolve_.erase(id); // else the reconciler asks again later
      if (!x && x.error() == ec::expired)
        ++stats["resolved_too_late"];
    };
    auto name = "resolve(" + str(id) + "," + outcome + ")";
    // Units only with succeeded, and only when named (0: the whole hold).
    if (outcome == "succeeded" && units != 0)
      call<resolution>(name, chat, answered, atom::resolve_v, chat, id, outcome,
                       units);
    else
      call<resolution>(name, chat, answered, atom::resolve_v, chat, id,
                       outcome);
  };
  switch (pick(4)) {
  case 0: // the provider did the work
    resolve("succeeded");
    break;
  case 1: // it did not
    resolve("failed");
    break;
  case 2: // two reconcilers, or a retry
    resolve("succeeded");
    resolve("succeeded");
    break;
  default: // two reconcilers that disagree: one outcome wins
    ++stats["resolves_racing"];
    resolve("succeeded");
    resolve("failed");
    break;
  }
  settle();
}

/// Workers that went away come back after a sweep freed their chat: their
/// heartbeat and commit must find the reservation expired, never charge it.
void simulation::late_workers_return() {
  std::vector<reservation_id> back;
  for (const auto& [id, j] : jobs_)
    if (j.back_at != caf::timestamp{} && j.back_at <= now())
      back.push_back(id);
  for (auto id : back) {
    ++stats["late_worker_returns"];
    auto& j = jobs_[id];
    j.back_at = {};
    j.fate = 0;
    ask<reservation>("late-heartbeat(" + str(id) + ")", j.chat,
                     atom::heartbeat_v, j.chat, id);
    issue_commit(id);
  }
  if (!back.empty())
    settle();
}

// -- the planted straddling job -----------------------------------------------

/// A job whose hold was taken in one window and which is committed in the
/// next is what the window rule is about (invariant 16); a run may see no
/// refill while a job is open, so one is planted in every run, on a chat
/// of its own and with faults off: it is not left to the odds.
void simulation::straddle(bool forced) {
  auto c = straddle_chat;
  auto chat = world->chats.find(c);
  if (straddled_ || straddle_kind_.empty() || chat == world->chats.end()
      || !chat->second.window_started_at)
    return;
  auto turns_at = *chat->second.window_started_at + world->refill_interval;
  if (!forced && now() < turns_at - straddle_lead)
    return;
  straddled_ = true;
  trail << " straddle";
  auto fault_percent = world->fault_percent;
  world->fault_percent = 0;
  pass_time_until(std::max(now(), turns_at - straddle_lead));
  settle();
  bool committed = false;
  auto r = until_known<reservation>("reserve(" + str(c) + ",straddling)", c,
                                    nullptr, atom::reserve_v, c,
                                    kind{straddle_kind_}, "straddle-" + str(c));
  auto id = r ? r->id : 0;
  std::string who = "straddle-worker";
  bool started = false;
  if (r)
    started = static_cast<bool>(until_known<reservation>(
      "start(" + str(id) + ")", c,
      [this, id, who](caf::expected<reservation>& x) {
        if (x) {
          acks_.started_ok.insert(id);
          auditor.on_start(acks_, id, who);
        }
      },
      atom::start_v, c, id, who));
  if (started) {
    // The window turns while the job runs: the touch's answer is the new
    // window's status with the job open.
    pass_time_until(std::max(now(), turns_at));
    settle();
    until_known<chat_status>("touch(" + str(c) + ")", c, checked_status(),
                             atom::touch_v, c);
    if (world->chats[c].window > r->window) {
      acks_.commit_requested.insert(id);
      acks_.commit_units.emplace(id, 0);
      committed = static_cast<bool>(until_known<receipt>(
        "commit(" + str(id) + ",straddling)", c,
        [this](caf::expected<receipt>& x) {
          if (x)
            auditor.on_receipt(*world, acks_, *x);
        },
        atom::commit_v, c, id));
    }
  }
  ++stats[committed ? "straddles_planted" : "straddles_missed"];
  world->fault_percent = fault_percent;
}

// -- admins and user updates --------------------------------------------------

/// Top-ups (retries reuse payment ids) and voids of grants, premium
/// changes, user updates that refill the daily window, flags: all racing
/// the jobs.
void simulation::admin_acts() {
  auto c = some_chat();
  switch (pick(5)) {
  case 0:
  case 1:
    admin_tops_up(c);
    // A refund or a chargeback: now and then a grant is voided.
    if (pick(3) == 0)
      admin_voids(some_chat());
    break;
  case 2: {
    auto until = now() + std::chrono::seconds(pick(60)) - 20s;
    call<chat_status>("premium(" + str(c) + ")", c, checked_status(),
                      atom::premium_v, c, until);
    break;
  }
  case 3:
    call<chat_status>("touch(" + str(c) + ")", c, checked_status(),
                      atom::touch_v, c);
    break;
  default: {
    flags_update x;
    x.started = true;
    if (pick(4) == 0)
      x.blocked = pick(2) == 0;
    call<chat_status>("flags(" + str(c) + ")", c, checked_status(),
                      atom::flags_v, c, x);
    break;
  }
  }
  if (pick(3) == 0) // the admin's change races a user's tap
    issue_reserve(c, last_kind(), {});
  settle();
}

// -- faults -------------------------------------------------------------------

/// Storage unreachable for a while (invariant 5 is checked on every answer
/// given meanwhile, in call()).
void simulation::outage() {
  auto d = std::chrono::milliseconds(pick(3000));
  world->outage = true;
  world->impair("outage", now() + d);
  auto c = some_chat();
  issue_reserve(c, last_kind(), {});
  ask<chat_status>("status(" + str(c) + ")", c, atom::status_v, c);
  for (auto& [id, j] : jobs_)
    if (j.started && j.back_at == caf::timestamp{}) {
      issue_commit(id);
      break;
    }
  pass_time(d);
  world->outage = false;
  settle();
}

/// A persistence actor dies; the supervisor restarts it after a backoff.
void simulation::kill_persistence() {
  auto victim =
    members_[static_cast<size_t>(pick(static_cast<int>(members_.size())))];
  world->impair("persistence_killed", now() + options_.restart_backoff_max
                                        + options_.chat.store_timeout);
  caf::anon_send_exit(victim, caf::exit_reason::kill);
  pass_time(std::chrono::milliseconds(50 + pick(500)));
}

/// Kills a chat actor, either while its Postgres request is in flight (the
/// request stalls, so the answer comes after the kill) or at whatever
/// moment; once the registry saw it die, the next operation respawns it.
/// CAF 0.17 keeps an exit message behind an awaited response (and, as
/// observed here, often behind the operations that arrive meanwhile): the
/// actor dies after its Postgres request ended. Every caller waiting on it
/// at the kill is answered within one store timeout: the one in flight
/// with its answer or storage_unavailable, the ones queued behind it with
/// theirs or request_receiver_down.
void simulation::kill_chat(bool mid_operation) {
  auto c = some_chat();
  caf::actor victim;
  if (mid_operation) {
    world->stall_next = c;
    world->stalled_chat = {};
    auto job = std::find_if(jobs_.begin(), jobs_.end(), [c](const auto& x) {
      return x.second.chat == c && x.second.started
             && x.second.back_at == caf::timestamp{};
    });
    if (job != jobs_.end())
      issue_commit(job->first);
    else
      issue_reserve(c, first_kind(), {});
    settle();
    world->stall_next = 0;
    victim = caf::actor_cast<caf::actor>(world->stalled_chat);
    if (!victim) { // refused before Postgres (outage, reconnect)
      ++stats["chat_kill_missed"];
      return;
    }
  } else {
    victim = caf::actor_cast<caf::actor>(world->actors[c]);
    if (!victim)
      return;
  }
  std::vector<std::shared_ptr<sim_call>> waiting;
  for (const auto& x : calls_)
    if (x->chat == c && !x->done)
      waiting.push_back(x);
  world->impair(mid_operation ? "chat_killed_mid_operation" : "chat_killed",
                now() + options_.chat.store_timeout);
  world->killed.insert(victim.address());
  caf::anon_send_exit(victim, kill_reason_);
  settle();
  if (mid_operation) {
    pass_time(options_.chat.store_timeout);
    for (const auto& x : waiting)
      if (!x->done)
        auditor.flag("caller of a killed chat actor not answered: " + x->what);
  }
  if (!terminated(victim)) { // the exit waits in its mailbox (see above)
    ++stats["chat_kill_deferred"];
    return;
  }
  // The registry saw the exit: the next operation respawns the chat actor.
  call<chat_status>(
    "status-after-kill(" + str(c) + ")", c,
    [this, c](caf::expected<chat_status>& x) {
      if (x)
        auditor.on_status(*x);
      else if (x.error() == caf::sec::request_receiver_down)
        auditor.flag("chat " + str(c) + " not respawned after a kill");
    },
    atom::status_v, c);
  settle();
}

/// An operation arrives in the very instant the chat actor's idle timer
/// fires: the registry's idle handshake against the new message.
void simulation::passivation_race() {
  auto c = some_chat();
  call<chat_status>("status(" + str(c) + ")", c, checked_status(),
                    atom::status_v, c);
  settle();
  auto before = world->actors[c];
  auto at = last_answer_.count(c) ? last_answer_[c] : now();
  pass_time_until(std::max(now(), at + options_.chat.idle_timeout));
  ++world->faults["passivation_race"];
  issue_reserve(c, first_kind(), {});
  if (pick(2) == 0)
    call<chat_status>("status(" + str(c) + ")", c, checked_status(),
                      atom::status_v, c);
  settle();
  if (world->actors[c] != before)
    ++stats["passivated_in_race"];
}

} // namespace chargeonce::test
