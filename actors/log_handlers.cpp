// SPDX-License-Identifier: Apache-2.0
#include "actors/log_handlers.hpp"

#include "actors/log_limiter.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace chargeonce {

namespace {

/// Who sent the message being handled: its node, as the limiter's key. All
/// actors of one client process share a node, and a message without a
/// sender cannot be told apart from another one.
std::string peer_of(caf::scheduled_actor* self) {
  const auto& sender = self->current_sender();
  return sender ? caf::to_string(sender->node()) : std::string{"anonymous"};
}

void log_suppressed(const std::string& actor, caf::actor_id id,
                    const std::string& peer, uint64_t n) {
  spdlog::warn("unexpected messages not logged actor={} id={} peer={} "
               "suppressed={}",
               actor, id, peer, n);
}

} // namespace

void install_log_handlers(caf::scheduled_actor* self) {
  // Shared with the exit functor below, which reports what is still owed.
  auto limiter = std::make_shared<log_limiter>();
  self->set_default_handler(
    [self, limiter](caf::scheduled_actor*,
                    caf::message_view& x) -> caf::result<caf::message> {
      auto peer = peer_of(self);
      auto verdict = limiter->admit(peer, log_limiter::clock::now());
      if (verdict.suppressed > 0)
        log_suppressed(self->name(), self->id(), peer, verdict.suppressed);
      if (verdict.log) // rendered only then: it costs the message's size
        spdlog::warn("unexpected message actor={} id={} peer={} message={}",
                     self->name(), self->id(), peer,
                     log_excerpt(caf::to_string(x.content()),
                                 unexpected_message_bytes_max));
      return caf::sec::unexpected_message; // the requester still gets an error
    });
  self->attach_functor(
    [name = std::string{self->name()}, id = self->id(), limiter] {
      for (const auto& [peer, n] : limiter->take_suppressed())
        log_suppressed(name, id, peer, n);
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
