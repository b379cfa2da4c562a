// SPDX-License-Identifier: Apache-2.0
#include "actors/facade_actor.hpp"

#include "actors/batch_relay.hpp"
#include "actors/log_handlers.hpp"
#include "actors/metrics/recording.hpp"
#include "protocol/validation.hpp"

#include <caf/all.hpp>

#include <chrono>

namespace chargeonce {

namespace {

/// No timeout of its own. An answer is guaranteed below: the chat actor
/// answers each operation within its store timeout, and CAF answers every
/// request left in the mailbox of an actor that ends with an error. The
/// client's own request timeout bounds the caller. A finite timeout here
/// cost one CAF clock entry per operation until it expired, answered or
/// not: at 17,000 operations/s and 60 s, about a million entries and
/// 200 MB of server memory.
const caf::duration relay_timeout{caf::infinite};

// The metrics label of each operation relayed as its own message, by its
// atom.
using op = operation_type;
// clang-format off
constexpr op operation_of(atom::create) { return op::create; }
constexpr op operation_of(atom::top_up) { return op::top_up; }
constexpr op operation_of(atom::void_grant) { return op::void_grant; }
constexpr op operation_of(atom::premium) { return op::set_premium; }
constexpr op operation_of(atom::flags) { return op::set_flags; }
constexpr op operation_of(atom::subscribe) { return op::subscribe; }
constexpr op operation_of(atom::limits) { return op::set_limits; }
constexpr op operation_of(atom::uncertain) { return op::uncertain; }
constexpr op operation_of(atom::resolve) { return op::resolve; }
constexpr op operation_of(atom::unresolved) { return op::unresolved; }
constexpr op operation_of(atom::history) { return op::history; }
constexpr op operation_of(atom::explain) { return op::explain; }
// clang-format on

/// Asks the registry and answers the client itself. Never `delegate`: a
/// delegated answer carries the internal actor's handle to the client, which
/// could then call that actor directly, past this facade's role. Every
/// client operation passes here, so this is where it is counted and timed
/// (on the actor clock: simulated time in deterministic tests).
template <class T, class Self, class Atom, class... Ts>
caf::result<T> relay(Self* self, const core_actor& api, Atom a, Ts... xs) {
  auto rp = self->template make_response_promise<T>();
  auto done = [self, kind = operation_of(a),
               t0 = self->clock().now()](const caf::error& err) {
    metrics::record_operation(kind, err, self->clock().now() - t0);
  };
  self->request(api, relay_timeout, a, xs...)
    .then(
      [rp, done](T& x) mutable {
        done(caf::error{});
        rp.deliver(std::move(x));
      },
      [rp, done](caf::error& err) mutable {
        done(err);
        rp.deliver(std::move(err));
      });
  return rp;
}

/// The value a published message answers, from the outcome its operation
/// came back as.
template <class T>
caf::expected<T> value_of(outcome&& x) {
  if (x.error)
    return std::move(x.error);
  caf::optional<T>* value = nullptr;
  if constexpr (std::is_same_v<T, reservation>)
    value = &x.reservation;
  else if constexpr (std::is_same_v<T, receipt>)
    value = &x.receipt;
  else
    value = &x.status;
  if (!*value)
    return caf::make_error(ec::internal, "an outcome without its value");
  return std::move(**value);
}

/// Relays a published message as the operation it stands for (converted
/// here, once) and answers the value of its outcome. `invalid` refuses it
/// here: what the operation cannot carry, such as units given as 0.
template <class T, class Self>
caf::result<T> relay_operation(Self* self, const core_actor& api, operation op,
                               caf::error invalid = {}) {
  auto t0 = self->clock().now();
  auto done = [self, type = op.type, t0](const caf::error& err) {
    metrics::record_operation(type, err, self->clock().now() - t0);
  };
  if (invalid) {
    done(invalid);
    return invalid;
  }
  auto rp = self->template make_response_promise<T>();
  self->request(api, relay_timeout, atom::apply_v, std::move(op))
    .then(
      [rp, done](outcome& x) mutable {
        auto value = value_of<T>(std::move(x));
        done(value ? caf::error{} : value.error());
        if (value)
          rp.deliver(std::move(*value));
        else
          rp.deliver(std::move(value.error()));
      },
      [rp, done](caf::error& err) mutable {
        done(err);
        rp.deliver(std::move(err));
      });
  return rp;
}

// The operations the published messages stand for. Units the message names
// must be 1 or more: in an operation, 0 means none named.

operation reserve_of(chat_id chat, const kind& k, const std::string& request_id,
                     int32_t units = 0) {
  return {operation_type::reserve, chat, 0, k, request_id, units, {}};
}

operation cancel_of(chat_id chat, reservation_id id,
                    const std::string& request_id) {
  auto out = operation_on(operation_type::cancel, chat, id);
  out.request_id = request_id;
  return out;
}

operation step_of(operation_type type, chat_id chat, reservation_id id,
                  const std::string& worker = {}, int32_t units = 0) {
  auto out = operation_on(type, chat, id);
  out.worker = worker;
  out.units = units;
  return out;
}

} // namespace

api_facade_actor::behavior_type make_api_facade(api_facade_actor::pointer self,
                                                const core_actor& api) {
  install_log_handlers(self);
  return {
    [self, api](atom::batch, std::vector<operation> ops) {
      return relay_batch(self, api, relay_timeout, std::move(ops),
                         any_operation);
    },
    [self, api](atom::create op, const chat_spec& spec) {
      return relay<chat_status>(self, api, op, spec);
    },
    [self, api](atom::reserve, chat_id chat, const kind& k,
                const std::string& request_id) {
      return relay_operation<reservation>(self, api,
                                          reserve_of(chat, k, request_id));
    },
    [self, api](atom::reserve, chat_id chat, const kind& k,
                const std::string& request_id, int32_t units) {
      return relay_operation<reservation>(
        self, api, reserve_of(chat, k, request_id, units),
        validate_given_units(units));
    },
    [self, api](atom::start, chat_id chat, reservation_id id) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::start, chat, id));
    },
    [self, api](atom::heartbeat, chat_id chat, reservation_id id) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::heartbeat, chat, id));
    },
    [self, api](atom::commit, chat_id chat, reservation_id id) {
      return relay_operation<receipt>(
        self, api, step_of(operation_type::commit, chat, id));
    },
    [self, api](atom::commit, chat_id chat, reservation_id id, int32_t units) {
      return relay_operation<receipt>(
        self, api, step_of(operation_type::commit, chat, id, {}, units),
        validate_given_units(units));
    },
    [self, api](atom::fail, chat_id chat, reservation_id id) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::fail, chat, id));
    },
    [self, api](atom::start, chat_id chat, reservation_id id,
                const std::string& worker) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::start, chat, id, worker));
    },
    [self, api](atom::heartbeat, chat_id chat, reservation_id id,
                const std::string& worker) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::heartbeat, chat, id, worker));
    },
    [self, api](atom::commit, chat_id chat, reservation_id id,
                const std::string& worker) {
      return relay_operation<receipt>(
        self, api, step_of(operation_type::commit, chat, id, worker));
    },
    [self, api](atom::commit, chat_id chat, reservation_id id, int32_t units,
                const std::string& worker) {
      return relay_operation<receipt>(
        self, api, step_of(operation_type::commit, chat, id, worker, units),
        validate_given_units(units));
    },
    [self, api](atom::fail, chat_id chat, reservation_id id,
                const std::string& worker) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::fail, chat, id, worker));
    },
    [self, api](atom::uncertain op, chat_id chat, reservation_id id,
                const std::string& provider_ref, const std::string& worker) {
      return relay<reservation>(self, api, op, chat, id, provider_ref, worker);
    },
    [self, api](atom::cancel, chat_id chat) {
      return relay_operation<reservation>(
        self, api, operation_on(operation_type::cancel, chat));
    },
    [self, api](atom::cancel, chat_id chat, reservation_id id,
                const std::string& request_id) {
      return relay_operation<reservation>(self, api,
                                          cancel_of(chat, id, request_id));
    },
    [self, api](atom::status, chat_id chat) {
      return relay_operation<chat_status>(
        self, api, operation_on(operation_type::status, chat));
    },
    [self, api](atom::touch, chat_id chat) {
      return relay_operation<chat_status>(
        self, api, operation_on(operation_type::touch, chat));
    },
    [self, api](atom::top_up op, chat_id chat, int64_t credits,
                const std::string& payment_id) {
      return relay<top_up_receipt>(self, api, op, chat, credits, payment_id,
                                   grant_terms{});
    },
    [self, api](atom::top_up op, chat_id chat, int64_t credits,
                const std::string& payment_id, const grant_terms& terms) {
      return relay<top_up_receipt>(self, api, op, chat, credits, payment_id,
                                   terms);
    },
    [self, api](atom::void_grant op, chat_id chat, int64_t grant,
                const std::string& payment_id) {
      return relay<grant_info>(self, api, op, chat, grant, payment_id);
    },
    [self, api](atom::premium op, chat_id chat, caf::timestamp until) {
      return relay<chat_status>(self, api, op, chat, until);
    },
    [self, api](atom::flags op, chat_id chat, const flags_update& x) {
      return relay<chat_status>(self, api, op, chat, x);
    },
    [self, api](atom::limits op, chat_id chat, const limits_update& x) {
      return relay<chat_status>(self, api, op, chat, x);
    },
    [self, api](atom::subscribe op, caf::actor who) {
      return relay<bool>(self, api, op, std::move(who));
    },
    [self, api](atom::subscribe op, caf::actor who, event_id after) {
      return relay<bool>(self, api, op, std::move(who), after);
    },
    [self, api](atom::uncertain op, chat_id chat, reservation_id id,
                const std::string& provider_ref) {
      return relay<reservation>(self, api, op, chat, id, provider_ref);
    },
    [self, api](atom::resolve op, chat_id chat, reservation_id id,
                const std::string& outcome) {
      return relay<resolution>(self, api, op, chat, id, outcome);
    },
    [self, api](atom::resolve op, chat_id chat, reservation_id id,
                const std::string& outcome, int32_t units) {
      return relay<resolution>(self, api, op, chat, id, outcome, units);
    },
    [self, api](atom::unresolved op, reservation_id after, uint32_t limit) {
      return relay<unresolved_page>(self, api, op, after, limit);
    },
    [self, api](atom::history op, chat_id chat, int64_t before,
                uint32_t limit) {
      return relay<history_page>(self, api, op, chat, before, limit);
    },
    [self, api](atom::explain op, chat_id chat) {
      return relay<chat_explanation>(self, api, op, chat);
    },
  };
}

gateway_actor::behavior_type make_gateway(gateway_actor::pointer self,
                                          const core_actor& api) {
  install_log_handlers(self);
  return {
    [self, api](atom::batch, std::vector<operation> ops) {
      return relay_batch(self, api, relay_timeout, std::move(ops),
                         gateway_operation);
    },
    [self, api](atom::touch, chat_id chat) {
      return relay_operation<chat_status>(
        self, api, operation_on(operation_type::touch, chat));
    },
    [self, api](atom::reserve, chat_id chat, const kind& k,
                const std::string& request_id) {
      return relay_operation<reservation>(self, api,
                                          reserve_of(chat, k, request_id));
    },
    [self, api](atom::reserve, chat_id chat, const kind& k,
                const std::string& request_id, int32_t units) {
      return relay_operation<reservation>(
        self, api, reserve_of(chat, k, request_id, units),
        validate_given_units(units));
    },
    [self, api](atom::cancel, chat_id chat) {
      return relay_operation<reservation>(
        self, api, operation_on(operation_type::cancel, chat));
    },
    [self, api](atom::cancel, chat_id chat, reservation_id id,
                const std::string& request_id) {
      return relay_operation<reservation>(self, api,
                                          cancel_of(chat, id, request_id));
    },
    [self, api](atom::status, chat_id chat) {
      return relay_operation<chat_status>(
        self, api, operation_on(operation_type::status, chat));
    },
    [self, api](atom::subscribe op, caf::actor who) {
      return relay<bool>(self, api, op, std::move(who));
    },
    [self, api](atom::subscribe op, caf::actor who, event_id after) {
      return relay<bool>(self, api, op, std::move(who), after);
    },
  };
}

worker_actor::behavior_type make_worker(worker_actor::pointer self,
                                        const core_actor& api) {
  install_log_handlers(self);
  return {
    [self, api](atom::batch, std::vector<operation> ops) {
      return relay_batch(self, api, relay_timeout, std::move(ops),
                         worker_operation);
    },
    [self, api](atom::start, chat_id chat, reservation_id id) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::start, chat, id));
    },
    [self, api](atom::heartbeat, chat_id chat, reservation_id id) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::heartbeat, chat, id));
    },
    [self, api](atom::commit, chat_id chat, reservation_id id) {
      return relay_operation<receipt>(
        self, api, step_of(operation_type::commit, chat, id));
    },
    [self, api](atom::commit, chat_id chat, reservation_id id, int32_t units) {
      return relay_operation<receipt>(
        self, api, step_of(operation_type::commit, chat, id, {}, units),
        validate_given_units(units));
    },
    [self, api](atom::fail, chat_id chat, reservation_id id) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::fail, chat, id));
    },
    [self, api](atom::start, chat_id chat, reservation_id id,
                const std::string& worker) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::start, chat, id, worker));
    },
    [self, api](atom::heartbeat, chat_id chat, reservation_id id,
                const std::string& worker) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::heartbeat, chat, id, worker));
    },
    [self, api](atom::commit, chat_id chat, reservation_id id,
                const std::string& worker) {
      return relay_operation<receipt>(
        self, api, step_of(operation_type::commit, chat, id, worker));
    },
    [self, api](atom::commit, chat_id chat, reservation_id id, int32_t units,
                const std::string& worker) {
      return relay_operation<receipt>(
        self, api, step_of(operation_type::commit, chat, id, worker, units),
        validate_given_units(units));
    },
    [self, api](atom::fail, chat_id chat, reservation_id id,
                const std::string& worker) {
      return relay_operation<reservation>(
        self, api, step_of(operation_type::fail, chat, id, worker));
    },
    [self, api](atom::uncertain op, chat_id chat, reservation_id id,
                const std::string& provider_ref, const std::string& worker) {
      return relay<reservation>(self, api, op, chat, id, provider_ref, worker);
    },
    [self, api](atom::uncertain op, chat_id chat, reservation_id id,
                const std::string& provider_ref) {
      return relay<reservation>(self, api, op, chat, id, provider_ref);
    },
    [self, api](atom::resolve op, chat_id chat, reservation_id id,
                const std::string& outcome) {
      return relay<resolution>(self, api, op, chat, id, outcome);
    },
    [self, api](atom::resolve op, chat_id chat, reservation_id id,
                const std::string& outcome, int32_t units) {
      return relay<resolution>(self, api, op, chat, id, outcome, units);
    },
    [self, api](atom::unresolved op, reservation_id after, uint32_t limit) {
      return relay<unresolved_page>(self, api, op, after, limit);
    },
  };
}

admin_actor::behavior_type make_admin(admin_actor::pointer self,
                                      const core_actor& api) {
  install_log_handlers(self);
  return {
    [self, api](atom::create op, const chat_spec& spec) {
      return relay<chat_status>(self, api, op, spec);
    },
    [self, api](atom::top_up op, chat_id chat, int64_t credits,
                const std::string& payment_id) {
      return relay<top_up_receipt>(self, api, op, chat, credits, payment_id,
                                   grant_terms{});
    },
    [self, api](atom::top_up op, chat_id chat, int64_t credits,
                const std::string& payment_id, const grant_terms& terms) {
      return relay<top_up_receipt>(self, api, op, chat, credits, payment_id,
                                   terms);
    },
    [self, api](atom::void_grant op, chat_id chat, int64_t grant,
                const std::string& payment_id) {
      return relay<grant_info>(self, api, op, chat, grant, payment_id);
    },
    [self, api](atom::premium op, chat_id chat, caf::timestamp until) {
      return relay<chat_status>(self, api, op, chat, until);
    },
    [self, api](atom::flags op, chat_id chat, const flags_update& x) {
      return relay<chat_status>(self, api, op, chat, x);
    },
    [self, api](atom::limits op, chat_id chat, const limits_update& x) {
      return relay<chat_status>(self, api, op, chat, x);
    },
    [self, api](atom::history op, chat_id chat, int64_t before,
                uint32_t limit) {
      return relay<history_page>(self, api, op, chat, before, limit);
    },
    [self, api](atom::explain op, chat_id chat) {
      return relay<chat_explanation>(self, api, op, chat);
    },
  };
}

} // namespace chargeonce
