// SPDX-License-Identifier: Apache-2.0
// What an exception caught while talking to Postgres means: an outage the
// caller may retry (storage_unavailable) or a bug (internal). One rule for
// every store operation, so a bug is never reported as an outage.
#pragma once

#include "protocol/errors.hpp"

#include <exception>
#include <stdexcept>
#include <string>

namespace chargeonce::persistence {

/// Thrown where the code finds a state it promises never to reach (e.g.
/// the batch function answering another number of rows than it was given
/// operations): a bug, classified internal.
struct broken_invariant : std::logic_error {
  using std::logic_error::logic_error;
};

/// Thrown when a new connection lands on a server that cannot take writes
/// (a standby in recovery, or read-only by default): not a connection to
/// keep. An outage (the caller retries; nothing was sent), SQLSTATE 25006.
struct not_primary : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A caught exception, classified.
struct failure {
  /// storage_unavailable or internal.
  ec code = ec::internal;
  /// The SQLSTATE Postgres sent, or the one libpqxx's exception type stands
  /// for (40P01 for a deadlock); "" if none.
  std::string sqlstate;
  /// Postgres refused the statement (an SQL error, a deadlock, a
  /// serialization failure): it wrote nothing.
  bool refused = false;
  /// The exception's type and text on one line, for the log only.
  std::string detail;
};

/// An outage that says no writable Postgres is reachable: the connection
/// broke or could not be made (no SQLSTATE, class 08), the server is
/// shutting down or starting (57P01 … 57P03), or it is a standby (25006).
/// Not a deadlock, a serialization failure or a statement timeout, which a
/// working primary answers.
bool lost_primary(const failure& f);

/// `text` with line breaks and tabs as spaces, trailing spaces dropped:
/// libpq messages span lines; a log line and an error context must not.
std::string one_line(std::string text);

/// Classifies `ep` (not null). libpqxx's run-time failures are outages:
/// pqxx::broken_connection (too_many_connections too), pqxx::sql_error and
/// its subclasses (a statement_timeout is SQLSTATE 57014) but for SQLSTATE
/// class 42 other than 42501 (SQL that names what the schema lacks, or
/// does not parse: a bug, internal),
/// pqxx::in_doubt_error, pqxx::transaction_rollback (deadlock,
/// serialization failure, statement completion unknown) and any other
/// pqxx::failure. Everything else is a bug: libpqxx's usage, conversion and
/// range errors, std::out_of_range, std::bad_variant_access,
/// broken_invariant, an exception not derived from std::exception.
failure classify(const std::exception_ptr& ep);

} // namespace chargeonce::persistence
