// SPDX-License-Identifier: Apache-2.0
// The CPU Postgres spends, read from /proc where Postgres runs on this
// machine: one backend's (the persistence layer alone) or the whole
// cluster's (a run: the backends of the server, the baseline's clients and
// the bench, and the background processes that write WAL and check-
// point).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace chargeonce::bench {

/// User + system CPU seconds of a local Postgres process; none when `pid`
/// is not a Postgres process of this machine (a remote database, or a pid
/// that means something else here).
std::optional<double> postgres_process_cpu_s(int64_t pid);

/// The postmaster of the cluster `dsn` connects to, when that cluster runs
/// on this machine (a Unix socket, localhost or 127.0.0.1): the parent of
/// the backend that serves a connection, which needs no privilege to find.
/// None for a remote cluster, or when /proc does not show it.
std::optional<int64_t> local_postmaster(const std::string& dsn);

/// User + system CPU seconds of all of a local cluster's processes so far:
/// the postmaster, its children that run, and those that ended (counted
/// in the postmaster once it waited for them), so that connections closed
/// between two readings still count. Other users of the same cluster count
/// too. None when `postmaster` is no longer a Postgres process.
std::optional<double> postgres_cluster_cpu_s(int64_t postmaster);

} // namespace chargeonce::bench
