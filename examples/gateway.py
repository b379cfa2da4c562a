#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A bot gateway's billing middleware, with the client package chargeonce
(clients/python; standard library only).

For one user update: touch the chat, reserve the job's price, and tell the
user "your job is queued" when the queue notice arrives on the event stream.
Prints one JSON line per step; exit 0 when the job is queued and noticed.

  CHARGEONCE_URL=http://127.0.0.1:8080 CHARGEONCE_TOKEN=<gateway token> \\
    examples/gateway.py CHAT KIND REQUEST_ID

REQUEST_ID comes from the user's intent (e.g. "msg-18-upscale": message 18's
upscale button), so a redelivered update or a double tap is the same job.
"""
import json
import os
import sys
import time

try:
    import chargeonce
except ImportError:  # run from a checkout: the package's source beside us
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "clients", "python", "src"))
    import chargeonce

from chargeonce import (BusyError, ChargeonceError, InsufficientImagesError,
                        InsufficientMessagesError)


def say(**fields):
    print(json.dumps(fields), flush=True)


def main(chat, kind, request_id):
    client = chargeonce.Client(os.environ.get("CHARGEONCE_URL", "http://127.0.0.1:8080"),
                               gateway_token=os.environ["CHARGEONCE_TOKEN"])
    # Subscribed before the reserve: its queue notice cannot be missed.
    with client.events() as events:
        try:
            client.touch(chat)
            job = client.reserve(chat, kind, request_id)
        except (InsufficientMessagesError, InsufficientImagesError) as e:
            say(step="reserve", reply="out of credits", error=e.error, message=e.message)
            return 0
        except BusyError as e:  # every slot of the chat is taken
            say(step="reserve", reply="one job at a time", error=e.error, message=e.message)
            return 0
        except ChargeonceError as e:  # after the client's retries (same request id)
            say(step="reserve", status=e.status, error=e.error, message=e.message)
            return 1
        say(step="reserve", reservation=job.id, queue=job.queue, held=job.held.all,
            request_id=job.request_id)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # events of every chat arrive: pick ours
            event = events.next(1.0)
            if event and event.event == "queue_notice" and event.reservation == job.id:
                say(step="notice", reply="your job is queued", reservation=job.id)
                return 0
    say(step="notice", error="no queue notice within 30 s", reservation=job.id)
    return 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
