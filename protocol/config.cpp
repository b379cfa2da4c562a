// SPDX-License-Identifier: Apache-2.0
#include "protocol/config.hpp"

#include "protocol/errors.hpp"
#include "protocol/type_ids.hpp"

#include <caf/actor_system_config.hpp>

#include <algorithm>
#include <thread>

namespace chargeonce {

void register_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::chargeonce>();
  cfg.add_error_category(
    caf::atom(error_category_name),
    [](uint8_t code, caf::atom_value, const caf::message& ctx) {
      std::string out = "chargeonce::";
      out += to_string(static_cast<ec>(code));
      if (!ctx.empty()) {
        out += ' ';
        out += caf::to_string(ctx);
      }
      return out;
    });
}

void prefer_few_workers(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads",
          std::max(size_t{1}, size_t{std::thread::hardware_concurrency()} / 2));
}

void deserialize_on_middleman_thread(caf::actor_system_config& cfg) {
  cfg.set("middleman.workers", size_t{0});
}

} // namespace chargeonce
