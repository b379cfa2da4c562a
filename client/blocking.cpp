// SPDX-License-Identifier: Apache-2.0
// The blocking calls: each parks the calling thread until its chat's
// servers answered or the last one failed.
#include "client/client_impl.hpp"
#include "protocol/interfaces.hpp"
#include "protocol/validation.hpp"

#include <caf/all.hpp>

#include <future>
#include <utility>

namespace chargeonce::client {

// -- how one call travels -----------------------------------------------------

template <class T, class... Ts>
caf::expected<T> client::impl::call(const operation& op, const Ts&... xs) {
  return call_ranked<T>(op.chat, retry_safe(op), op, xs...);
}

template <class T, class... Ts>
caf::expected<T> client::impl::call_admin(operation_type type, chat_id chat,
                                          const Ts&... xs) {
  return call_ranked<T>(chat, retry_safe(type), caf::none, xs...);
}

template <class T, class... Ts>
caf::expected<T> client::impl::call_ranked(chat_id chat, bool may_retry,
                                           const caf::optional<operation>& op,
                                           const Ts&... xs) {
  caf::error last = caf::make_error(caf::sec::no_actor_published_at_port);
  for (auto server : rank(opts.servers, chat)) {
    auto to = connection(server);
    if (to) {
      auto out = op && takes_batches(server) ? batched<T>(*to, *op)
                                             : single<T>(*to, xs...);
      if (out || is_service_error(out.error()))
        return out;
      last = out.error();
      forget(server);
    } else {
      last = to.error();
    }
    if (!may_retry)
      break;
  }
  return last;
}

template <class T>
caf::expected<T> client::impl::batched(const caf::actor& to,
                                       const operation& op) {
  auto answer = batching->submit(to, op);
  // The batch request has its own timeout; this bound only guards
  // against a sender that went away.
  if (answer.wait_for(opts.timeout + std::chrono::seconds(1))
      != std::future_status::ready)
    return caf::make_error(caf::sec::request_timeout);
  try {
    return from_outcome(answer.get(), static_cast<T*>(nullptr));
  } catch (const std::future_error&) {
    return caf::make_error(caf::sec::request_timeout,
                           "the client's batch sender stopped");
  }
}

template <class T, class... Ts>
caf::expected<T> client::impl::single(const caf::actor& to, const Ts&... xs) {
  caf::expected<T> out{caf::sec::none};
  caf::scoped_actor self{sys};
  self->request(to, opts.timeout, xs...)
    .receive([&](T& x) { out = std::move(x); },
             [&](caf::error& err) { out = std::move(err); });
  return out;
}

// -- the hot path -------------------------------------------------------------

caf::expected<chat_status> client::touch(chat_id chat) {
  return impl_->call<chat_status>(operation_of(operation_type::touch, chat),
                                  atom::touch_v, chat);
}

caf::expected<reservation> client::reserve(chat_id chat, const kind& k,
                                           const std::string& request_id) {
  // An id of the client's own where the caller gave none, the same on the
  // client's retries of this call (retry.hpp).
  auto id = request_id.empty() ? make_auto_request_id() : request_id;
  operation op{operation_type::reserve, chat, 0, k, id, 0};
  return impl_->call<reservation>(op, atom::reserve_v, chat, k, id);
}

caf::expected<reservation> client::reserve(chat_id chat, const kind& k,
                                           const std::string& request_id,
                                           int32_t units) {
  // In a batch, units 0 stands for "not given": refused here, not sent.
  if (auto err = validate_given_units(units))
    return err;
  auto id = request_id.empty() ? make_auto_request_id() : request_id;
  operation op{operation_type::reserve, chat, 0, k, id, units};
  return impl_->call<reservation>(op, atom::reserve_v, chat, k, id, units);
}

caf::expected<reservation> client::cancel(chat_id chat) {
  return impl_->call<reservation>(operation_of(operation_type::cancel, chat),
                                  atom::cancel_v, chat);
}

caf::expected<reservation> client::cancel(chat_id chat, reservation_id id,
                                          const std::string& request_id) {
  return impl_->call<reservation>(
    operation{operation_type::cancel, chat, id, kind::text, request_id},
    atom::cancel_v, chat, id, request_id);
}

caf::expected<chat_status> client::status(chat_id chat) {
  return impl_->call<chat_status>(operation_of(operation_type::status, chat),
                                  atom::status_v, chat);
}

caf::expected<reservation> client::start(chat_id chat, reservation_id id) {
  return impl_->call<reservation>(operation_of(operation_type::start, chat, id),
                                  atom::start_v, chat, id);
}

caf::expected<reservation> client::heartbeat(chat_id chat, reservation_id id) {
  return impl_->call<reservation>(
    operation_of(operation_type::heartbeat, chat, id), atom::heartbeat_v, chat,
    id);
}

caf::expected<receipt> client::commit(chat_id chat, reservation_id id) {
  return impl_->call<receipt>(operation_of(operation_type::commit, chat, id),
                              atom::commit_v, chat, id);
}

caf::expected<receipt> client::commit(chat_id chat, reservation_id id,
                                      int32_t units) {
  // In a batch, units 0 stands for "not given": refused here, not sent.
  if (auto err = validate_given_units(units))
    return err;
  auto op = operation_of(operation_type::commit, chat, id);
  op.units = units;
  return impl_->call<receipt>(op, atom::commit_v, chat, id, units);
}

caf::expected<reservation> client::fail(chat_id chat, reservation_id id) {
  return impl_->call<reservation>(operation_of(operation_type::fail, chat, id),
                                  atom::fail_v, chat, id);
}

// -- a worker that names itself ----------------------------------------------

caf::expected<reservation> client::start(chat_id chat, reservation_id id,
                                         const std::string& worker) {
  auto op = of_worker(operation_type::start, chat, id, worker);
  return impl_->call<reservation>(op, atom::start_v, chat, id, worker);
}

caf::expected<reservation> client::heartbeat(chat_id chat, reservation_id id,
                                             const std::string& worker) {
  auto op = of_worker(operation_type::heartbeat, chat, id, worker);
  return impl_->call<reservation>(op, atom::heartbeat_v, chat, id, worker);
}

caf::expected<receipt> client::commit(chat_id chat, reservation_id id,
                                      const std::string& worker) {
  auto op = of_worker(operation_type::commit, chat, id, worker);
  return impl_->call<receipt>(op, atom::commit_v, chat, id, worker);
}

caf::expected<receipt> client::commit(chat_id chat, reservation_id id,
                                      int32_t units,
                                      const std::string& worker) {
  // In a batch, units 0 stands for "not given": refused here, not sent.
  if (auto err = validate_given_units(units))
    return err;
  auto op = of_worker(operation_type::commit, chat, id, worker);
  op.units = units;
  return impl_->call<receipt>(op, atom::commit_v, chat, id, units, worker);
}

caf::expected<reservation> client::fail(chat_id chat, reservation_id id,
                                        const std::string& worker) {
  auto op = of_worker(operation_type::fail, chat, id, worker);
  return impl_->call<reservation>(op, atom::fail_v, chat, id, worker);
}

// -- outcome unknown: requests of their own
// ------------------------------------

caf::expected<reservation> client::uncertain(chat_id chat, reservation_id id,
                                             const std::string& provider_ref) {
  return impl_->call_admin<reservation>(
    operation_type::uncertain, chat, atom::uncertain_v, chat, id, provider_ref);
}

caf::expected<reservation> client::uncertain(chat_id chat, reservation_id id,
                                             const std::string& provider_ref,
                                             const std::string& worker) {
  return impl_->call_admin<reservation>(operation_type::uncertain, chat,
                                        atom::uncertain_v, chat, id,
                                        provider_ref, worker);
}

caf::expected<resolution> client::resolve(chat_id chat, reservation_id id,
                                          const std::string& outcome) {
  return impl_->call_admin<resolution>(operation_type::resolve, chat,
                                       atom::resolve_v, chat, id, outcome);
}

caf::expected<resolution> client::resolve(chat_id chat, reservation_id id,
                                          const std::string& outcome,
                                          int32_t units) {
  return impl_->call_admin<resolution>(
    operation_type::resolve, chat, atom::resolve_v, chat, id, outcome, units);
}

caf::expected<unresolved_page> client::unresolved(reservation_id after,
                                                  uint32_t limit) {
  // Of every chat: the first server answers from the shared database.
  return impl_->call_admin<unresolved_page>(operation_type::unresolved, 0,
                                            atom::unresolved_v, after, limit);
}

// -- the support view ---------------------------------------------------------

caf::expected<history_page> client::history(chat_id chat, int64_t before,
                                            uint32_t limit) {
  return impl_->call_admin<history_page>(operation_type::history, chat,
                                         atom::history_v, chat, before, limit);
}

caf::expected<chat_explanation> client::explain(chat_id chat) {
  return impl_->call_admin<chat_explanation>(operation_type::explain, chat,
                                             atom::explain_v, chat);
}

// -- administration -----------------------------------------------------------

caf::expected<chat_status> client::create(const chat_spec& spec) {
  return impl_->call_admin<chat_status>(operation_type::create, spec.chat,
                                        atom::create_v, spec);
}

caf::expected<top_up_receipt> client::top_up(chat_id chat, int64_t credits,
                                             const std::string& payment_id) {
  return impl_->call_admin<top_up_receipt>(
    operation_type::top_up, chat, atom::top_up_v, chat, credits, payment_id);
}

caf::expected<grant_info> client::void_grant(chat_id chat, int64_t grant,
                                             const std::string& payment_id) {
  return impl_->call_admin<grant_info>(operation_type::void_grant, chat,
                                       atom::void_grant_v, chat, grant,
                                       payment_id);
}

caf::expected<top_up_receipt> client::top_up(chat_id chat, int64_t credits,
                                             const std::string& payment_id,
                                             const grant_terms& terms) {
  return impl_->call_admin<top_up_receipt>(operation_type::top_up, chat,
                                           atom::top_up_v, chat, credits,
                                           payment_id, terms);
}

caf::expected<chat_status> client::set_premium(chat_id chat,
                                               caf::timestamp until) {
  return impl_->call_admin<chat_status>(operation_type::set_premium, chat,
                                        atom::premium_v, chat, until);
}

caf::expected<chat_status> client::set_flags(chat_id chat,
                                             const flags_update& x) {
  return impl_->call_admin<chat_status>(operation_type::set_flags, chat,
                                        atom::flags_v, chat, x);
}

caf::expected<chat_status>
client::set_limits(chat_id chat, caf::optional<int32_t> max_active_jobs) {
  return set_limits(
    chat, limits_update{std::move(max_active_jobs), true, caf::none, false});
}

caf::expected<chat_status> client::set_limits(chat_id chat,
                                              const limits_update& x) {
  return impl_->call_admin<chat_status>(operation_type::set_limits, chat,
                                        atom::limits_v, chat, x);
}

caf::expected<size_t> client::subscribe(const caf::actor& who) {
  return subscribe_after(who, caf::none);
}

caf::expected<size_t> client::subscribe(const caf::actor& who, event_id after) {
  return subscribe_after(who, after);
}

caf::expected<size_t> client::subscribe_after(const caf::actor& who,
                                              caf::optional<event_id> after) {
  size_t accepted = 0;
  caf::error last;
  for (size_t server = 0; server < impl_->opts.servers.size(); ++server) {
    auto to = impl_->connection(server);
    if (!to) {
      last = to.error();
      continue;
    }
    auto on_answer = [&](bool ok) {
      accepted += ok ? 1 : 0;
    };
    auto on_error = [&](caf::error& err) {
      last = std::move(err);
    };
    caf::scoped_actor self{impl_->sys};
    if (after)
      self->request(*to, impl_->opts.timeout, atom::subscribe_v, who, *after)
        .receive(on_answer, on_error);
    else
      self->request(*to, impl_->opts.timeout, atom::subscribe_v, who)
        .receive(on_answer, on_error);
  }
  if (accepted == 0 && last)
    return last;
  return accepted;
}

} // namespace chargeonce::client
