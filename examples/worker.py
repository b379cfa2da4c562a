#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A worker loop, with the client package chargeonce (clients/python;
standard library only).

Reads jobs from stdin, one "CHAT RESERVATION [fail]" per line (your own
queue stands in here), and for each: start under a worker identity of its
own, heartbeat while working, then commit on success or fail on failure; a
heartbeat that answers cancel_requested (the user cancelled) makes it stop
and fail the job. A job that is gone, swept, ended or run by another
delivery (already_started) is dropped unrun. Prints one JSON line per job.
(With Celery, chargeonce.celery_tasks.billed_task does all this.)

  CHARGEONCE_URL=http://127.0.0.1:8080 CHARGEONCE_TOKEN=<worker token> \\
    examples/worker.py < jobs.txt
"""
import json
import os
import secrets
import sys
import time

try:
    import chargeonce
except ImportError:  # run from a checkout: the package's source beside us
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "clients", "python", "src"))
    import chargeonce

from chargeonce import AlreadyStartedError, ExpiredError, InvalidStateError, NotFoundError


def work(client, chat, reservation, succeeds):
    # One identity per delivery: if the queue hands this job to a second
    # worker too, chargeonce refuses that one (already_started).
    worker = f"worker.py:{os.getpid()}:{secrets.token_hex(4)}"
    try:
        client.start(chat, reservation, worker)
    except (NotFoundError, ExpiredError, InvalidStateError, AlreadyStartedError) as e:
        return {"job": reservation, "dropped": e.error}
    for _ in range(3):  # the real work goes here; heartbeats keep the lease
        time.sleep(0.1)
        try:
            beat = client.heartbeat(chat, reservation, worker)
        except ExpiredError:  # fenced off: never commit
            return {"job": reservation, "dropped": "expired"}
        if beat.cancel_requested:
            # The user cancelled (the kind's cancel_after_start is "request"):
            # stop and release the hold. A worker whose provider already did
            # the work would commit instead.
            client.fail(chat, reservation, worker)
            return {"job": reservation, "aborted": "cancel_requested", "failed": True}
    if not succeeds:
        held = client.fail(chat, reservation, worker).held
        return {"job": reservation, "failed": True, "held": held.all}
    # The client retries a lost answer with the same worker; a retry answers
    # the first receipt, charged once.
    receipt = client.commit(chat, reservation, worker=worker)
    return {"job": reservation, "committed": True, "charged": receipt.charged.all,
            "units": receipt.units}


def main():
    client = chargeonce.Client(os.environ.get("CHARGEONCE_URL", "http://127.0.0.1:8080"),
                               worker_token=os.environ["CHARGEONCE_TOKEN"])
    for line in sys.stdin:
        chat, reservation, *flags = line.split()
        print(json.dumps(work(client, int(chat), int(reservation), "fail" not in flags)),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
