// SPDX-License-Identifier: Apache-2.0
#include "tests/client/async_script.hpp"

#include "protocol/errors.hpp"

#include <doctest/doctest.h>

namespace chargeonce::test {

std::string str(const pockets& x) {
  return std::to_string(x.get(pocket::daily_messages)) + "/"
         + std::to_string(x.get(pocket::daily_images)) + "/"
         + std::to_string(x.get(pocket::balance));
}

std::string summary(const caf::error& err) {
  return "error " + error_name(err);
}

std::string summary(const caf::expected<reservation>& x) {
  if (!x)
    return summary(x.error());
  return std::string{"reservation "} + to_string(x->status) + " "
         + to_string(x->kind) + " held " + str(x->held) + " request_id '"
         + x->request_id + "' queue " + x->queue
         + (x->lease_expires_at ? " leased" : " no lease");
}

std::string summary(const caf::expected<receipt>& x) {
  if (!x)
    return summary(x.error());
  return std::string{"receipt "} + to_string(x->kind) + " charged "
         + str(x->charged);
}

std::string summary(const caf::expected<chat_status>& x) {
  if (!x)
    return summary(x.error());
  return "status available " + str(x->amounts) + " active "
         + (x->active ? to_string(x->active->status) : "none")
         + (x->premium ? " premium" : "") + (x->started ? " started" : "")
         + (x->blocked ? " blocked" : "") + (x->banned ? " banned" : "");
}

std::vector<std::string> blocking_script(gate_fixture& f) {
  client_side side;
  client::client c{side.sys, options_for(f.gate_port, client::role::all, true)};
  blocking_calls calls{c};
  auto out = script(calls, f.make_chat({1, 0, 0}), fresh_chat());
  // Make sure the script says something: its key lines, spelled out.
  REQUIRE(out.size() == 30);
  CHECK(out[0] == "status: status available 1/0/0 active none");
  CHECK(out[1] == "start unknown: error not_found");
  CHECK(out[5] == "cancel nothing: error not_found");
  CHECK(out[7] == "reserve b: error busy");
  CHECK(out[8].find("(same)") != std::string::npos);
  CHECK(out[10] == "heartbeat queued: error invalid_state");
  CHECK(out[11] == "commit queued: error invalid_state");
  CHECK(out[13] == "start cancelled: error not_found");
  CHECK(out[14] == "reserve image: error insufficient_images");
  CHECK(out[18] == "cancel started: error too_late");
  CHECK(out[20] == "commit: receipt text charged 1/0/0");
  CHECK(out[21] == "commit again: receipt text charged 1/0/0 (same)");
  CHECK(out[22] == "fail committed: error invalid_state");
  CHECK(out[23] == "reserve empty: error insufficient_messages");
  CHECK(out[25] == "status after: status available 0/0/0 active none");
  CHECK(out[26] == "status unknown chat: error not_found");
  return out;
}

void check_async_script(gate_fixture& f, const client::options& opts,
                        const std::vector<std::string>& want) {
  tracker t{64};
  std::vector<std::string> got;
  {
    client_side side;
    client::client c{side.sys, opts};
    async_calls calls{c, t};
    got = script(calls, f.make_chat({1, 0, 0}), fresh_chat());
  }
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("line " << i);
    CHECK(got[i] == want[i]);
  }
  check_exactly_once(t, want.size());
}

} // namespace chargeonce::test
