// SPDX-License-Identifier: Apache-2.0
// The worker process that chargeonce-chaos kills mid-job: the chaos binary
// re-executed with --worker-process. It reserves, starts and heartbeats one
// job until it is SIGKILLed, writing each request before it is sent and
// each answer after it came to stdout, which the parent reads into its
// record afterwards.
#pragma once

#include "tools/chaos/record.hpp"

#include <string>
#include <vector>

namespace chargeonce::chaos {

/// The child's arguments after --worker-process.
struct worker_process_args {
  std::string servers; ///< H1:P1,H2:P2
  chat_id chat = 0;
  uint64_t seed = 0;
  uint64_t key = 0;           ///< its request_id number
  std::string kind = "image"; ///< what it reserves
};

/// The command line that runs one.
std::vector<std::string> worker_process_command(const std::string& self,
                                                const worker_process_args& a);

/// main() of the child; never returns normally (it is killed).
int worker_process_main(const worker_process_args& a);

/// Reads the dead child's output (to EOF) into `rec` as actor `actor`,
/// whose jobs are of kind `k`; returns the reservations it was
/// acknowledged.
std::vector<reservation_id> collect_worker_output(int fd, uint32_t actor,
                                                  const kind& k, recorder& rec);

} // namespace chargeonce::chaos
