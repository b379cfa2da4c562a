# SPDX-License-Identifier: Apache-2.0
"""The Celery app the two real workers of tests/clients/celery.sh run.

Its one task stands in for a paid provider call: each call appends the
delivery's worker identity to a file named after the reservation (the
provider's call counter), then behaves as the test asked (`mode`)."""
import os
import time

from celery import Celery

from chargeonce import Client, RetryPolicy
from chargeonce.celery_tasks import ProviderTimeout, billed_task, install

env = os.environ
state = env["CHARGEONCE_TEST_STATE"]  # the provider's counters, the drops

app = Celery("billing_app", broker=env["CHARGEONCE_TEST_REDIS"])
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    broker_transport_options={"visibility_timeout": float(env.get("CHARGEONCE_TEST_VISIBILITY", "10"))},
    # One message at a time per process: a prefetched one would wait behind a hung task.
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # How long a worker waits for the result of a lost process before it
    # gives the task up (and, with task_reject_on_worker_lost, requeues it):
    # below the lease, so that the redelivery meets the job still running.
    worker_lost_wait=1.0,
)


def record_drop(chat, reservation, worker, reason):
    with open(os.path.join(state, f"dropped-{reservation}"), "a") as f:
        f.write(f"{reason} {worker}\n")


install(app, lambda: Client(env["CHARGEONCE_TEST_URL"], worker_token=env["CHARGEONCE_TEST_WORKER_TOKEN"],
                            retry=RetryPolicy(max_attempts=8)),
        lease_duration=5, sweep_interval=1, on_drop=record_drop)


@billed_task(app, kind="image")
def render(job, mode):
    with open(os.path.join(state, f"provider-{job.id}"), "a") as f:
        f.write(job.worker + "\n")
    with open(os.path.join(state, f"running-{job.id}"), "w") as f:
        f.write(str(os.getpid()))
    if mode == "fail":
        raise RuntimeError("the provider said no")
    if mode == "timeout":
        raise ProviderTimeout()
    if mode == "slow":  # long enough for a second delivery to arrive meanwhile
        time.sleep(2)
    if mode == "hang":  # until the test kills this process
        time.sleep(600)
    if mode == "until-cancelled":  # the heartbeat thread notices the cancel request
        # (sent as a text job: the test server takes a cancel after start as a request)
        for _ in range(600):
            job.check()
            time.sleep(0.1)
        raise RuntimeError("never cancelled")
    return f"rendered {job.id}"

