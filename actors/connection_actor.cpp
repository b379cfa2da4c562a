// SPDX-License-Identifier: Apache-2.0
#include "actors/connection_actor.hpp"

#include "actors/log_handlers.hpp"

#include <caf/all.hpp>

namespace chargeonce {

connection_job::connection_job(persistence::store_options opts)
    : db(std::move(opts)) {
  // nop
}

connection_actor::behavior_type
make_connection(connection_actor::stateful_pointer<connection_state> self,
                std::shared_ptr<connection_job> job, connection_owner owner) {
  install_log_handlers(self);
  return {
    [self, job, owner](atom::apply) {
      if (job->run)
        job->run(job->db);
      else
        job->results = job->db.apply(job->ops);
      self->send(owner, atom::done_v);
    },
  };
}

} // namespace chargeonce
