// SPDX-License-Identifier: Apache-2.0
#include "actors/log_handlers.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace chargeonce {

void install_log_handlers(caf::scheduled_actor* self) {
  self->set_default_handler(
    [self](caf::scheduled_actor*,
           caf::message_view& x) -> caf::result<caf::message> {
      spdlog::warn("unexpected message actor={} id={} message={}", self->name(),
                   self->id(), caf::to_string(x.content()));
      return caf::sec::unexpected_message; // the requester still gets an error
    });
  self->set_exception_handler([self](std::exception_ptr& ep) -> caf::error {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      spdlog::error("actor failed actor={} id={} error={}", self->name(),
                    self->id(), e.what());
    } catch (...) {
      spdlog::error("actor failed actor={} id={} error=unknown exception",
                    self->name(), self->id());
    }
    return caf::sec::runtime_error; // becomes the exit reason
  });
}

} // namespace chargeonce
