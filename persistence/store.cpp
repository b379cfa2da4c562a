// SPDX-License-Identifier: Apache-2.0
// The billing operations: one transaction each. The hot ones are a batch of
// one through the server-side functions (chargeonce_apply_one): the SQL is
// the one implementation of every decision.
#include "persistence/store_internal.hpp"
#include "protocol/validation.hpp"

namespace chargeonce::persistence {

store::store(store_options opts) : impl_(std::make_unique<impl>()) {
  impl_->opts = std::move(opts);
  // Filled on the first connection (impl::learn_ordinals).
  impl_->ordinals = pocket_ordinals{impl_->opts.dsn};
}

store::~store() = default;

int store::connect_backend() {
  try {
    return impl_->connection().backendpid();
  } catch (const std::exception& e) {
    spdlog::warn("connect_backend failed error={}", one_line(e.what()));
    impl_->conn.reset();
    return 0;
  }
}

namespace {

/// One hot operation through the server-side functions: a batch of one.
template <class T>
caf::expected<T> single(store& db, operation op) {
  auto result = db.apply({std::move(op)}).front();
  if (auto err = std::get_if<caf::error>(&result))
    return std::move(*err);
  return std::get<T>(std::move(result));
}

} // namespace

int store::backend_pid() const {
  return impl_->conn && impl_->conn->is_open() ? impl_->conn->backendpid() : 0;
}

caf::expected<bool> store::ping() {
  return impl_->run<bool, pqxx::nontransaction>(
    "ping", 0, 0, [](pqxx::nontransaction& tx) -> caf::expected<bool> {
      tx.exec("SELECT 1");
      return true;
    });
}

uint64_t store::connections_made() const {
  return impl_->connections_made;
}

bool store::unavailable() const {
  return impl_->unavailable;
}

// -- operations ---------------------------------------------------------------

caf::expected<chat_status> store::create_chat(const chat_spec& spec) {
  if (auto err = validate_spec(spec))
    return err;
  if (auto err = validate_pockets(impl_->opts.products, spec.initial))
    return err;
  auto premium_us =
    spec.premium_until ? to_unix_micros(*spec.premium_until) : int64_t{0};
  return impl_->run<chat_status>(
    "create_chat", spec.chat, 0,
    [&](pqxx::work& tx) -> caf::expected<chat_status> {
      auto rs = tx.exec_params(
        "INSERT INTO chats (chat_id, pockets, premium_until, "
        "max_active_jobs) VALUES ($1, $2::integer[], CASE WHEN $3 THEN "
          + micros_to_timestamptz("$4::bigint")
          + " END, CASE WHEN $5 THEN $6::integer END) "
            "ON CONFLICT (chat_id) DO NOTHING RETURNING chat_id",
        spec.chat, impl_->ordinals.text(spec.initial),
        static_cast<bool>(spec.premium_until), premium_us,
        static_cast<bool>(spec.max_active_jobs),
        spec.max_active_jobs ? *spec.max_active_jobs : 0);
      if (rs.empty())
        return caf::make_error(ec::already_exists, "chat "
                                                     + std::to_string(spec.chat)
                                                     + " already exists");
      // The opening balance is one grant (source admin), as every credit of
      // the balance pocket is some grant's.
      tx.exec_params("SELECT chargeonce_grant_balance($1)", spec.chat);
      record_opening(tx, spec.chat, "admin", "create_chat");
      return read_status(tx, spec.chat, impl_->opts, impl_->ordinals);
    });
}

caf::expected<reservation> store::reserve(chat_id chat, const kind& k,
                                          const std::string& request_id,
                                          int32_t units) {
  return single<reservation>(
    *this, {operation_type::reserve, chat, 0, k, request_id, units});
}

caf::expected<reservation> store::start(chat_id chat, reservation_id id,
                                        const std::string& worker) {
  return single<reservation>(
    *this, {operation_type::start, chat, id, kind::text, {}, 0, worker});
}

caf::expected<reservation> store::heartbeat(chat_id chat, reservation_id id,
                                            const std::string& worker) {
  return single<reservation>(
    *this, {operation_type::heartbeat, chat, id, kind::text, {}, 0, worker});
}

caf::expected<receipt> store::commit(chat_id chat, reservation_id id,
                                     int32_t units, const std::string& worker) {
  return single<receipt>(
    *this, {operation_type::commit, chat, id, kind::text, {}, units, worker});
}

caf::expected<reservation> store::fail(chat_id chat, reservation_id id,
                                       const std::string& worker) {
  return single<reservation>(
    *this, {operation_type::fail, chat, id, kind::text, {}, 0, worker});
}

caf::expected<reservation> store::cancel(chat_id chat) {
  return cancel(chat, 0, {});
}

caf::expected<reservation> store::cancel(chat_id chat, reservation_id id,
                                         const std::string& request_id) {
  return single<reservation>(
    *this, {operation_type::cancel, chat, id, kind::text, request_id});
}

caf::expected<chat_status> store::status(chat_id chat) {
  return single<chat_status>(*this,
                             {operation_type::status, chat, 0, kind::text, {}});
}

} // namespace chargeonce::persistence
