// SPDX-License-Identifier: Apache-2.0
#include "actors/connection_actor.hpp"

#include "actors/log_handlers.hpp"

#include <caf/all.hpp>

namespace chargeonce {

connection_job::connection_job(persistence::store_options opts)
    : db(std::move(opts)) {
  // nop
}

namespace {

/// Whether the batch's rows should come before its commit: worth a second
/// wake-up of this thread only when another batch may be ready to go out
/// behind it, as under load. One operation alone with nothing staged (one
/// client) is answered in one read, after its commit.
bool early_rows(connection_job& job, const std::vector<operation>& ops) {
  if (ops.size() > 1)
    return true;
  std::lock_guard<std::mutex> guard{job.mtx};
  return !job.staged.empty();
}

} // namespace

connection_actor::behavior_type
make_connection(connection_actor::stateful_pointer<connection_state> self,
                std::shared_ptr<connection_job> job, connection_owner owner) {
  install_log_handlers(self);
  return {
    [self, job = std::move(job), owner = std::move(owner)](atom::apply) {
      auto& db = job->db;
      // The next batch when it went out before this one was answered.
      std::vector<operation> next;
      bool sent = false;
      for (bool more = true; more;) {
        finished_job out;
        if (job->run) {
          job->run(db);
          job->run = nullptr;
          out.alone = true;
        } else {
          if (!sent)
            db.send(job->ops, early_rows(*job, job->ops));
          // Once this batch's rows are in, Postgres commits it: what was
          // staged meanwhile goes out now and waits there, so Postgres
          // starts on it right after the commit.
          db.await_rows();
          {
            std::lock_guard<std::mutex> guard{job->mtx};
            next.swap(job->staged);
          }
          if (!next.empty())
            db.send(next, early_rows(*job, next));
          out.results = db.receive();
        }
        out.connections_made = db.connections_made();
        out.unavailable = db.unavailable();
        {
          std::lock_guard<std::mutex> guard{job->mtx};
          job->ops.clear();
          sent = !next.empty();
          job->ops.swap(sent ? next : job->staged);
          next.clear();
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
