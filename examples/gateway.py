#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A bot gateway's billing middleware over chargeonce's HTTP API (stdlib only).

For one user update: touch the chat, reserve the job's price, and tell the
user "your job is queued" when the queue notice arrives on the event stream.
Prints one JSON line per step; exit 0 when the job is queued and noticed.

  CHARGEONCE_URL=http://127.0.0.1:8080 CHARGEONCE_TOKEN=<gateway token> \\
    examples/gateway.py CHAT KIND REQUEST_ID
"""
import json
import os
import queue
import sys
import threading
import urllib.error
import urllib.request

URL = os.environ.get("CHARGEONCE_URL", "http://127.0.0.1:8080")
HEADERS = {"Authorization": "Bearer " + os.environ["CHARGEONCE_TOKEN"]}


def call(method, path, body=None):
    """One request; returns (HTTP status, JSON body): errors are answers too."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method,
                                 headers={**HEADERS, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def read_events(out):
    """Puts "subscribed", then every event's JSON object, into `out`."""
    req = urllib.request.Request(URL + "/v1/events", headers=HEADERS)
    with urllib.request.urlopen(req, timeout=30) as stream:
        for raw in stream:  # Server-Sent Events: one field per line
            line = raw.decode().rstrip("\n")
            if line == ": subscribed":
                out.put("subscribed")
            elif line.startswith("data: "):
                out.put(json.loads(line[len("data: "):]))


def say(**fields):
    print(json.dumps(fields), flush=True)


def main(chat, kind, request_id):
    events = queue.Queue()
    threading.Thread(target=read_events, args=(events,), daemon=True).start()
    assert events.get(timeout=10) == "subscribed"

    status, state = call("POST", f"/v1/chats/{chat}/touch")
    if status != 200:
        return say(step="touch", status=status, **state) or 1
    status, res = call("POST", f"/v1/chats/{chat}/reservations",
                       {"kind": kind, "request_id": request_id})
    if status == 402:  # insufficient_messages / insufficient_images
        return say(step="reserve", reply="out of credits", **res) or 0
    if status == 409:  # busy: one job per chat
        return say(step="reserve", reply="one job at a time", **res) or 0
    if status != 200:  # 503: retry later with the same request_id
        return say(step="reserve", status=status, **res) or 1
    say(step="reserve", reservation=res["id"], queue=res["queue"], held=res["held"])

    while True:  # events of every chat arrive: pick ours
        event = events.get(timeout=30)
        if event.get("reservation") == res["id"] and event["event"] == "queue_notice":
            say(step="notice", reply="your job is queued", reservation=res["id"])
            return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
