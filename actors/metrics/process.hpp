// SPDX-License-Identifier: Apache-2.0
// The process metrics the official Prometheus client libraries export by
// default (process_cpu_seconds_total, process_resident_memory_bytes, ...),
// read from /proc at each scrape, so that dashboards and alerts written for
// any exporter work unchanged.
#pragma once

#include <cstdint>
#include <string>

namespace chargeonce::metrics {

/// One reading of this process. A field /proc does not give is negative
/// and left out of the rendering.
struct process_sample {
  double cpu_seconds = -1;        ///< user and system CPU time
  double resident_bytes = -1;     ///< resident set size
  double virtual_bytes = -1;      ///< virtual memory size
  double start_time_seconds = -1; ///< since the Unix epoch
  double open_fds = -1;
  double max_fds = -1; ///< the soft limit (RLIMIT_NOFILE)
};

process_sample read_process();

/// The families of `x`, in the text format.
void render_process(std::string& out, const process_sample& x);

} // namespace chargeonce::metrics
