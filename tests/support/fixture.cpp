// SPDX-License-Identifier: Apache-2.0
#include "tests/support/fixture.hpp"

#include "protocol/batch_request.hpp"
#include "protocol/errors.hpp"

#include <algorithm>

namespace chargeonce::test {

namespace {

/// The fake's own deadline for one held answer.
using expire_atom = caf::atom_constant<caf::atom("expire")>;

/// Answers now, or later when the log holds answers.
template <class T>
caf::result<T> answer(caf::event_based_actor* self,
                      const std::shared_ptr<fake_log>& log, std::string call,
                      T value) {
  log->calls.push_back(std::move(call));
  log->last_sender = self->current_sender();
  if (!log->hold)
    return value;
  auto rp = self->make_response_promise();
  auto ticket = ++log->tickets;
  log->owed.push_back(
    {caf::actor{self}, [rp, value]() mutable { rp.deliver(value); }, ticket,
     [rp]() mutable {
       rp.deliver(caf::make_error(ec::storage_unavailable,
                                  "Postgres did not answer in time"));
     }});
  self->delayed_send(self, log->store_timeout, expire_atom::value, ticket);
  return rp;
}

reservation make_reservation(chat_id chat, reservation_id id) {
  reservation r;
  r.id = id;
  r.chat = chat;
  r.queue = "text_generation";
  return r;
}

/// What cancel answers: the job deleted while queued, or (log's
/// cancel_requested) started and marked.
reservation cancelled(const std::shared_ptr<fake_log>& log, chat_id chat,
                      reservation_id id) {
  auto x = make_reservation(chat, id);
  if (log->cancel_requested) {
    x.status = reservation_status::in_progress;
    x.cancel_requested = true;
    // Written once, when the mark is set (a repeated cancel writes none).
    auto& table = log->event_table;
    if (std::none_of(table.begin(), table.end(), [&](const auto& e) {
          return e.event == "cancel_requested" && e.reservation == id;
        }))
      log->write_event("cancel_requested", chat, id);
  }
  return x;
}

std::string name(const char* op, chat_id chat) {
  return std::string{op} + " " + std::to_string(chat);
}

receipt make_receipt(chat_id chat, reservation_id id) {
  receipt x;
  x.reservation = id;
  x.chat = chat;
  return x;
}

chat_status make_status(const std::shared_ptr<fake_log>& log, chat_id chat) {
  chat_status st;
  st.chat = chat;
  if (log->active != 0)
    st.active = make_reservation(chat, log->active);
  return st;
}

/// One of the eight batchable operations, logged by its name.
caf::result<outcome> apply(caf::event_based_actor* self,
                           const std::shared_ptr<fake_log>& log,
                           const operation& op) {
  auto call = name(to_string(op.type), op.chat);
  log->applied.push_back(op);
  switch (op.type) {
  case operation_type::reserve:
    return answer(self, log, call,
                  as_outcome(make_reservation(op.chat, log->reserve_id)));
  case operation_type::commit:
    return answer(self, log, call,
                  as_outcome(make_receipt(op.chat, op.reservation)));
  case operation_type::cancel:
    return answer(self, log, call,
                  as_outcome(cancelled(
                    log, op.chat, op.reservation == 0 ? 1 : op.reservation)));
  case operation_type::status:
  case operation_type::touch:
    return answer(self, log, call, as_outcome(make_status(log, op.chat)));
  default:
    return answer(self, log, call,
                  as_outcome(make_reservation(op.chat, op.reservation)));
  }
}

} // namespace

caf::behavior fake_persistence(caf::event_based_actor* self,
                               std::shared_ptr<fake_log> log) {
  log->spawned.push_back(caf::actor{self});
  return {
    [=](atom::create, const chat_spec& spec) {
      chat_status st;
      st.chat = spec.chat;
      return answer(self, log, name("create", spec.chat), st);
    },
    [=](atom::apply, const operation& op) { return apply(self, log, op); },
    [=](atom::uncertain, chat_id chat, reservation_id id, const std::string&,
        const std::string&) {
      return answer(self, log, name("uncertain", chat),
                    make_reservation(chat, id));
    },
    [=](atom::limits, chat_id chat, const limits_update& x) {
      chat_status st;
      st.chat = chat;
      st.own_max_active_jobs = x.max_active_jobs;
      return answer(self, log, name("limits", chat), st);
    },
    [=](atom::release, chat_id chat, reservation_id id) {
      log->write_event("reservation_released", chat, id, "sweep_timeout");
      return answer(self, log, name("release", chat),
                    reservation_released{chat, id, "sweep_timeout"});
    },
    [=](atom::sweep, const sweep_cursor& after, uint32_t) {
      log->cursors.push_back(after);
      std::vector<sweep_candidate> page;
      if (!log->pages.empty()) {
        page = std::move(log->pages.front());
        log->pages.pop_front();
      }
      return page;
    },
    [=](atom::reactivate, const reactivation_cursor& after,
        uint32_t) -> caf::result<reactivation_page> {
      log->reactivation_cursors.push_back(after);
      if (log->reactivations.empty())
        return reactivation_page{};
      auto next = std::move(log->reactivations.front());
      log->reactivations.pop_front();
      if (!next)
        return next.error();
      return std::move(*next);
    },
    [=](atom::prune) { return uint64_t{0}; },
    [=](atom::expiry) { return uint64_t{0}; },
    [=](atom::events, event_id after, uint32_t limit) {
      event_page page;
      page.last_id = static_cast<event_id>(log->event_table.size());
      for (const auto& e : log->event_table)
        if (e.id > after && page.events.size() < limit)
          page.events.push_back(e);
      return page;
    },
    [=](expire_atom, uint64_t ticket) {
      auto& owed = log->owed;
      auto mine = std::find_if(owed.begin(), owed.end(), [&](const auto& x) {
        return x.ticket == ticket;
      });
      if (mine == owed.end())
        return;
      auto time_out = std::move(mine->time_out);
      owed.erase(mine);
      time_out();
    },
    [=](deliver_atom) {
      auto& owed = log->owed;
      auto mine = std::find_if(owed.begin(), owed.end(), [&](const auto& x) {
        return x.owner == caf::actor{self};
      });
      if (mine == owed.end())
        return;
      auto deliver = std::move(mine->deliver);
      owed.erase(mine);
      deliver();
    },
  };
}

caf::behavior event_recorder(caf::event_based_actor*,
                             std::shared_ptr<fake_log> log) {
  auto note = [log](const char* what, chat_id chat, reservation_id id) {
    log->events.push_back(std::string{what} + " " + std::to_string(chat) + " "
                          + std::to_string(id));
  };
  return {
    [=](const queue_notice& x) { note("queue_notice", x.chat, x.reservation); },
    [=](const reservation_released& x) {
      note("reservation_released", x.chat, x.reservation);
    },
    [=](const cancel_requested& x) {
      note("cancel_requested", x.chat, x.reservation);
    },
    [=](const reconcile_needed& x) {
      note("reconcile_needed", x.chat, x.reservation);
    },
    [=](const limits_refilled& x) { note("limits_refilled", x.chat, 0); },
  };
}

} // namespace chargeonce::test
