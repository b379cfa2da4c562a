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
    [self, job = std::move(job), owner = std::move(owner)](atom::apply) {
      for (bool more = true; more;) {
        finished_job out;
        if (job->run) {
          job->run(job->db);
          job->run = nullptr;
          out.alone = true;
        } else {
          out.results = job->db.apply(job->ops);
        }
        out.connections_made = job->db.connections_made();
        out.unavailable = job->db.unavailable();
        {
          std::lock_guard<std::mutex> guard{job->mtx};
          job->ops.clear();
          job->ops.swap(job->staged);
          out.taken = job->ops.size();
          job->finished.push_back(std::move(out));
        }
        // Decided before `done`: once the persistence actor learns that
        // nothing was taken, the job is its own again.
        more = !job->ops.empty();
        self->send(owner, atom::done_v);
      }
    },
  };
}

} // namespace chargeonce
