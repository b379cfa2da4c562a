// SPDX-License-Identifier: Apache-2.0
#include "tests/actors/fixture.hpp"

#include "protocol/errors.hpp"

namespace chargeonce::test {

namespace {

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
  log->owed.emplace_back([rp, value]() mutable { rp.deliver(value); });
  return rp;
}

reservation make_reservation(chat_id chat, reservation_id id) {
  reservation r;
  r.id = id;
  r.chat = chat;
  r.queue = "text_generation";
  return r;
}

} // namespace

caf::behavior fake_persistence(caf::event_based_actor* self,
                               std::shared_ptr<fake_log> log) {
  auto name = [](const char* op, chat_id chat) {
    return std::string{op} + " " + std::to_string(chat);
  };
  return {
    [=](atom::create, const chat_spec& spec) {
      chat_status st;
      st.chat = spec.chat;
      return answer(self, log, name("create", spec.chat), st);
    },
    [=](atom::reserve, chat_id chat, kind, const std::string&) {
      return answer(self, log, name("reserve", chat),
                    make_reservation(chat, 1));
    },
    [=](atom::start, chat_id chat, reservation_id id) {
      return answer(self, log, name("start", chat), make_reservation(chat, id));
    },
    [=](atom::commit, chat_id chat, reservation_id id) {
      receipt x;
      x.reservation = id;
      x.chat = chat;
      return answer(self, log, name("commit", chat), x);
    },
    [=](atom::fail, chat_id chat, reservation_id id) {
      return answer(self, log, name("fail", chat), make_reservation(chat, id));
    },
    [=](atom::cancel, chat_id chat) {
      return answer(self, log, name("cancel", chat), make_reservation(chat, 1));
    },
    [=](atom::status, chat_id chat) {
      chat_status st;
      st.chat = chat;
      return answer(self, log, name("status", chat), st);
    },
    [=](release_atom) {
      auto deliver = std::move(log->owed.front());
      log->owed.pop_front();
      deliver();
    },
  };
}

} // namespace chargeonce::test
