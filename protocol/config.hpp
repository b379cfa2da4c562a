// SPDX-License-Identifier: Apache-2.0
// Registration shared by every actor system that speaks chargeonce.
#pragma once

#include <caf/fwd.hpp>

namespace chargeonce {

/// Loads the type-ID block and the error category renderer into `cfg`.
/// Call in the constructor of every config: server, tools and tests, on
/// both ends of a connection.
void register_protocol(caf::actor_system_config& cfg);

} // namespace chargeonce
