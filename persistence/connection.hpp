// SPDX-License-Identifier: Apache-2.0
// The store's connection: a libpqxx connection that also lends out its
// libpq handle. The hot batches go through libpq's pipeline mode (the next
// batch is sent while Postgres commits the last one), which libpqxx 6.4
// does not wrap; everything else keeps using libpqxx on the same
// connection, between batches.
#pragma once

#include <pqxx/pqxx>

#include <cstdint>
#include <libpq-fe.h>
#include <string>

namespace chargeonce::persistence {

/// libpqxx's direct connection policy, remembering the handle it made:
/// libpqxx keeps it private, and may reconnect on its own.
class recorded_connect : public pqxx::connect_direct {
public:
  explicit recorded_connect(const std::string& opts) : connect_direct(opts) {
    // nop
  }

  handle do_startconnect(handle orig) override {
    raw_ = connect_direct::do_startconnect(orig);
    ++generation_;
    return raw_;
  }

  handle do_dropconnect(handle orig) noexcept override {
    raw_ = nullptr;
    return connect_direct::do_dropconnect(orig);
  }

  handle do_disconnect(handle orig) noexcept override {
    raw_ = nullptr;
    return connect_direct::do_disconnect(orig);
  }

  PGconn* raw() const noexcept { return raw_; }

  /// One more for each libpq connection made: what was prepared on an
  /// older one is gone.
  uint64_t generation() const noexcept { return generation_; }

private:
  PGconn* raw_ = nullptr;
  uint64_t generation_ = 0;
};

/// What pqxx::connection is, with the policy above (libpqxx's own
/// basic_connection_base, whose policy member is private).
class connection : public pqxx::connection_base {
public:
  explicit connection(const std::string& dsn)
      : pqxx::connection_base(policy_), options_(dsn), policy_(options_) {
    init();
  }

  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  ~connection() noexcept { close(); }

  PGconn* raw() const noexcept { return policy_.raw(); }

  uint64_t generation() const noexcept { return policy_.generation(); }

private:
  std::string options_; // before policy_, which keeps a reference to it
  recorded_connect policy_;
};

} // namespace chargeonce::persistence
