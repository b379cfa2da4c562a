#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A worker loop over chargeonce's HTTP API (stdlib only).

Reads jobs from stdin, one "CHAT RESERVATION [fail]" per line (your own
queue stands in here), and for each: start, heartbeat while working, then
commit on success or fail on failure; a heartbeat that answers
cancel_requested (the user cancelled) makes it stop and fail the job. Prints
one JSON line per job.

  CHARGEONCE_URL=http://127.0.0.1:8080 CHARGEONCE_TOKEN=<worker token> \\
    examples/worker.py < jobs.txt
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

URL = os.environ.get("CHARGEONCE_URL", "http://127.0.0.1:8080")
TOKEN = os.environ["CHARGEONCE_TOKEN"]


def step(chat, reservation, action):
    """POST .../reservations/ID/ACTION; returns (HTTP status, JSON body)."""
    req = urllib.request.Request(
        f"{URL}/v1/chats/{chat}/reservations/{reservation}/{action}",
        data=b"", method="POST", headers={"Authorization": "Bearer " + TOKEN})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def work(chat, reservation, succeeds):
    status, res = step(chat, reservation, "start")
    if status in (404, 410):  # gone or released by the sweeper: drop the job
        return {"job": reservation, "dropped": res["error"]}
    if status != 200:
        return {"job": reservation, "start": status, **res}
    for _ in range(3):  # the real work goes here; heartbeat keeps the lease
        time.sleep(0.1)
        status, res = step(chat, reservation, "heartbeat")
        if status == 410:  # fenced off: another job may own the chat now
            return {"job": reservation, "dropped": "expired"}
        if status == 200 and res.get("cancel_requested"):
            # The user cancelled (the kind's cancel_after_start is
            # "request"): stop and release the hold. A worker whose provider
            # already did the work would commit instead.
            status, res = step(chat, reservation, "fail")
            return {"job": reservation, "aborted": "cancel_requested",
                    "failed": status == 200}
    if not succeeds:
        status, res = step(chat, reservation, "fail")
        return {"job": reservation, "failed": status == 200, "held": res.get("held")}
    while True:  # commit is idempotent: retry until it answers
        status, res = step(chat, reservation, "commit")
        if status != 503:
            return {"job": reservation, "committed": status == 200, **res}
        time.sleep(1)


def main():
    for line in sys.stdin:
        chat, reservation, *flags = line.split()
        print(json.dumps(work(chat, reservation, "fail" not in flags)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
