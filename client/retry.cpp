// SPDX-License-Identifier: Apache-2.0
#include "client/retry.hpp"

#include "protocol/validation.hpp"

#include <cstdio>
#include <random>

namespace chargeonce::client {

bool retry_safe(operation_type x, const std::string& request_id) {
  if (!is_operation_type(x))
    return false;
  // Without a request id a repeated reserve is a second request for the
  // same chat (busy, or a second hold); with one it finds the first.
  if (x == operation_type::reserve)
    return !request_id.empty();
  return traits_of(x).retry_safe;
}

bool retry_safe(const operation& x) {
  return retry_safe(x.type, x.request_id);
}

std::string make_auto_request_id() {
  // Seeded once per thread from the system's entropy: ids of two clients,
  // processes or machines must not meet in one chat.
  thread_local std::mt19937_64 bits{[] {
    std::random_device entropy;
    std::seed_seq seed{entropy(), entropy(), entropy(), entropy()};
    return std::mt19937_64{seed};
  }()};
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx",
                static_cast<unsigned long long>(bits()),
                static_cast<unsigned long long>(bits()));
  return std::string{auto_request_id_prefix} + out;
}

} // namespace chargeonce::client
