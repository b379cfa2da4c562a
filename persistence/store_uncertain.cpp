// SPDX-License-Identifier: Apache-2.0
// Jobs of unknown outcome: uncertain, resolve, and the reconcilers' list.
// Rare operations, through the server-side functions in either mode
// (functions/08_uncertain.sql), each one statement.
#include "persistence/store_internal.hpp"
#include "protocol/validation.hpp"

namespace chargeonce::persistence {

caf::expected<reservation> store::uncertain(chat_id chat, reservation_id id,
                                            const std::string& provider_ref,
                                            const std::string& worker) {
  if (auto err = validate_uncertain(chat, id, provider_ref))
    return err;
  if (auto err = validate_worker(worker))
    return err;
  return impl_->run<reservation>(
    "uncertain", chat, id, [&](pqxx::work& tx) -> caf::expected<reservation> {
      if (auto refused = claim(tx, "uncertain", chat, id, worker))
        return refused;
      auto rs = tx.exec_params("SELECT * FROM chargeonce_uncertain($1, $2, $3)",
                               chat, id, provider_ref);
      if (rs[0]["outcome"].as<std::string>() != "ok")
        return refusal_of(rs[0]);
      auto x = reservation_of(rs[0], impl_->ordinals);
      // The same transaction: what the function just wrote (rare, so a
      // second round trip).
      auto u = tx.exec_params("SELECT provider_ref, "
                              "chargeonce_us(uncertain_at) FROM "
                              "uncertain_reservations WHERE id = $1",
                              id);
      x.provider_ref = u[0][0].as<std::string>();
      x.uncertain_at = from_unix_micros(u[0][1].as<int64_t>());
      return x;
    });
}

caf::expected<resolution> store::resolve(chat_id chat, reservation_id id,
                                         const std::string& outcome,
                                         int32_t units) {
  if (auto err = validate_resolve(chat, id, outcome, units))
    return err;
  return impl_->run<resolution>(
    "resolve", chat, id, [&](pqxx::work& tx) -> caf::expected<resolution> {
      auto rs =
        tx.exec_params("SELECT * FROM chargeonce_resolve($1, $2, $3, $4)", chat,
                       id, outcome, units);
      const auto& r = rs[0];
      if (r["outcome"].as<std::string>() != "ok")
        return refusal_of(r);
      resolution x;
      x.reservation = id;
      x.chat = chat;
      x.kind = parse_kind(r["kind"]);
      x.outcome = r["resolution"].as<std::string>();
      x.charged = impl_->ordinals.read(r["charged"].c_str());
      x.released = impl_->ordinals.read(r["released"].c_str());
      x.units = r["units"].as<int32_t>();
      x.resolved_at = from_unix_micros(r["resolved_us"].as<int64_t>());
      x.provider_ref = r["provider_ref"].as<std::string>();
      if (!r["window_number"].is_null())
        x.window = r["window_number"].as<int64_t>();
      return x;
    });
}

caf::expected<unresolved_page> store::unresolved(reservation_id after,
                                                 uint32_t limit) {
  if (auto err = validate_unresolved(after, limit))
    return err;
  return impl_->run<unresolved_page>(
    "unresolved", 0, after,
    [&](pqxx::work& tx) -> caf::expected<unresolved_page> {
      // The partial index of the open ones, walked by id from `after`.
      auto rs = tx.exec_params(
        "SELECT (chargeonce_with_uncertain(u)).*, u.provider_ref, "
        "chargeonce_us(u.uncertain_at) AS uncertain_us "
        "FROM uncertain_reservations u WHERE u.outcome IS NULL AND u.id > $1 "
        "ORDER BY u.id LIMIT $2",
        after, limit);
      unresolved_page out;
      for (const auto& r : rs) {
        auto x = reservation_of(r, impl_->ordinals);
        x.provider_ref = r["provider_ref"].as<std::string>();
        x.uncertain_at = from_unix_micros(r["uncertain_us"].as<int64_t>());
        out.jobs.push_back(std::move(x));
      }
      return out;
    });
}

} // namespace chargeonce::persistence
