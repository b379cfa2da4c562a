// SPDX-License-Identifier: Apache-2.0
#include "client/retry.hpp"

#include "protocol/validation.hpp"

#include <cstdio>
#include <random>

namespace chargeonce::client {

request_type request_of(operation_type x) {
  switch (x) {
  case operation_type::touch:
    return request_type::touch;
  case operation_type::reserve:
    return request_type::reserve;
  case operation_type::cancel:
    return request_type::cancel;
  case operation_type::status:
    return request_type::status;
  case operation_type::start:
    return request_type::start;
  case operation_type::heartbeat:
    return request_type::heartbeat;
  case operation_type::commit:
    return request_type::commit;
  case operation_type::fail:
    return request_type::fail;
  }
  // Only a peer could send another value; the client builds its own.
  return request_type::status;
}

// Cases with the same answer stay apart: each carries its own reason.
// NOLINTBEGIN(bugprone-branch-clone)
bool retry_safe(request_type x, const std::string& request_id) {
  switch (x) {
  case request_type::status:
    // Reads only.
    return true;
  case request_type::touch:
    // A repeat finds the chat registered and its window just opened or
    // refilled: it records activity again and refills nothing.
    return true;
  case request_type::reserve:
    // With a request_id a repeat returns the active reservation at the
    // price decided the first time; without one it is a second request
    // for the same chat and answers busy.
    return !request_id.empty();
  case request_type::cancel:
    // A bare cancel names the chat, not a reservation: repeated after the
    // first took effect, it would cancel the user's next job. Named, a
    // repeat would answer not_found for the job it did cancel.
    return false;
  case request_type::start:
    // Starting an in_progress reservation again returns it.
    return true;
  case request_type::heartbeat:
    // Sets the lease to now + lease_duration: a second one only moves it
    // a little further.
    return true;
  case request_type::commit:
    // Idempotent by reservation: a repeat returns the first receipt and
    // charges nothing.
    return true;
  case request_type::fail:
    // Names its reservation, so a repeat can only find it gone; it never
    // touches another job and nothing was charged.
    return true;
  case request_type::create:
    // A repeat after the first took effect answers already_exists, which
    // hides that this very call created the chat.
    return false;
  case request_type::top_up:
    // Idempotent by payment_id (which validation requires): a repeat
    // returns the first receipt and credits nothing.
    return true;
  case request_type::set_premium:
  case request_type::set_flags:
  case request_type::set_limits:
    // Set absolute values: a repeat sets the same ones.
    return true;
  case request_type::uncertain:
    // Names its reservation and provider_ref: a repeat answers the same.
    return true;
  case request_type::resolve:
    // Recorded once: a repeat of the same outcome answers the first
    // resolution and charges nothing more.
    return true;
  case request_type::unresolved:
  case request_type::history:
  case request_type::explain:
    return true; // reads
  }
  return false;
}
// NOLINTEND(bugprone-branch-clone)

bool retry_safe(const operation& x) {
  return retry_safe(request_of(x.type), x.request_id);
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
