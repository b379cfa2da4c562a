// SPDX-License-Identifier: Apache-2.0
// A private, socket-only PostgreSQL cluster for development and tests.
#pragma once

#include <caf/expected.hpp>

// clang-format off
// protocol/errors.hpp expands CAF_ERROR_CODE_ENUM, which calls make_message
// unqualified: it must be declared first (targets using the CAF precompiled
// header get it from there, plain compiles do not).
#include <caf/make_message.hpp>
#include "protocol/errors.hpp"
// clang-format on

#include <string>

namespace chargeonce {

/// A private PostgreSQL cluster under `dir`, made with the machine's own
/// binaries (the highest /usr/lib/postgresql/<N>/bin).
///
/// Layout: `<dir>/data` (PGDATA), `<dir>/socket` (the only listener: no TCP),
/// `<dir>/postgres.log` (server log plus the output of every tool we run).
/// When the process runs as root, the cluster is owned and run by the
/// `postgres` user, because PostgreSQL refuses to run as root.
class embedded_cluster {
public:
  /// `dir` may be relative (e.g. "var/postgres"); it is made absolute here so
  /// a later chdir cannot move the cluster.
  explicit embedded_cluster(std::string dir);

  /// Calls stop() if this object owns the running server.
  ~embedded_cluster();

  embedded_cluster(const embedded_cluster&) = delete;
  embedded_cluster& operator=(const embedded_cluster&) = delete;

  /// Creates the cluster with initdb if `dir` has none (trust auth on the
  /// local socket, superuser "chargeonce", UTF8), starts it with `pg_ctl -w`
  /// unless it is already running (then reuses it), creates the database
  /// "chargeonce" if missing, and returns a libpq connection string such as
  /// "host=<abs socket dir> port=5432 dbname=chargeonce user=chargeonce
  /// connect_timeout=5". Fails with ec::storage_unavailable, carrying the
  /// tail of the log.
  caf::expected<std::string> start();

  /// `pg_ctl stop -m fast -w`; idempotent; does nothing unless this object
  /// owns the server: it started it, or adopted one left running by a
  /// process that ended without stopping it (kill -9, OOM). A cluster that
  /// another live server owns (it holds `<dir>/owner.lock`) is reused but
  /// never stopped from here.
  void stop();

  /// The absolute cluster directory.
  const std::string& dir() const { return dir_; }

private:
  std::string dir_;
  std::string bin_dir_;
  bool started_ = false; ///< this object owns the running server
  int owner_lock_ = -1;  ///< flock on <dir>/owner.lock while we own it
};

} // namespace chargeonce
