# SPDX-License-Identifier: Apache-2.0
"""examples/telegram_bot.py offline: the bot process and a Celery worker of
its own against a stub Bot API server on loopback, a real chargeonce-server
and Redis (tests/clients/celery.sh starts those)."""
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest

from chargeonce import Client

env = os.environ
examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


class BotApi:
    """The few Bot API methods the bot calls; records what it sends and
    hands out the updates the test queues."""

    def __init__(self):
        self.updates = []
        self.calls = []
        self.lock = threading.Lock()
        self.next_message = 1000
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                method = self.path.rsplit("/", 1)[-1]
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    params = json.loads(body or b"{}")
                else:
                    params = {k: v[0] for k, v in parse_qs(body.decode()).items()}
                result = api.answer(method, params)
                data = json.dumps({"ok": True, "result": result}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/bot"

    def answer(self, method, params):
        with self.lock:
            if method != "getUpdates":
                self.calls.append((method, params))
            if method == "getMe":
                return {"id": 1, "is_bot": True, "first_name": "Upscaler", "username": "upscaler_bot"}
            if method == "getUpdates":
                offset = int(params.get("offset") or 0)
                ready = [u for u in self.updates if u["update_id"] >= offset]
                if ready:
                    return ready
            elif method == "sendMessage":
                self.next_message += 1
                return {"message_id": self.next_message, "date": int(time.time()),
                        "chat": {"id": int(params["chat_id"]), "type": "private"},
                        "text": params.get("text", "")}
            else:
                return True
        time.sleep(0.2)  # no update: a short long poll
        return []

    def press(self, chat, message_id, data):
        with self.lock:
            update_id = len(self.updates) + 1
            self.updates.append({"update_id": update_id, "callback_query": {
                "id": f"cb-{update_id}", "chat_instance": "ci", "data": data,
                "from": {"id": chat, "is_bot": False, "first_name": "User"},
                "message": {"message_id": message_id, "date": int(time.time()),
                            "chat": {"id": chat, "type": "private"}, "text": "What shall I do?"}}})

    def sent(self, method, chat=None):
        with self.lock:
            return [p for m, p in self.calls
                    if m == method and (chat is None or int(p.get("chat_id", 0)) == chat)]


def wait_for(what, check, seconds=90.0):
    started = time.monotonic()
    while True:
        value = check()
        if value:
            print(f"  {what}: after {time.monotonic() - started:.1f} s")
            return value
        assert time.monotonic() - started < seconds, f"{what}: not within {seconds:.0f} s"
        time.sleep(0.1)


@pytest.fixture
def processes():
    started = []
    yield started
    for p in started:
        p.terminate()
    for p in started:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_the_bot_reserves_notices_the_queue_and_its_task_commits_once(tmp_path, processes):
    api = BotApi()
    chat = 100_000_000_000 + secrets.randbelow(900_000_000_000)
    admin = Client(env["CHARGEONCE_TEST_URL"], env["CHARGEONCE_TEST_GATEWAY_TOKEN"],
                   admin_token=env["CHARGEONCE_TEST_ADMIN_TOKEN"])
    admin.create_chat(chat, daily_images=0, balance=1)
    provider_log = tmp_path / "provider.log"
    bot_env = {**env, "TELEGRAM_TOKEN": "123:test", "TELEGRAM_BASE_URL": api.base_url,
               "CHARGEONCE_URL": env["CHARGEONCE_TEST_URL"],
               "CHARGEONCE_GATEWAY_TOKEN": env["CHARGEONCE_TEST_GATEWAY_TOKEN"],
               "CHARGEONCE_WORKER_TOKEN": env["CHARGEONCE_TEST_WORKER_TOKEN"],
               # A database of its own: the billing_app workers take no message of this bot.
               "CELERY_BROKER": env["CHARGEONCE_TEST_REDIS"].rsplit("/", 1)[0] + "/1",
               "CHARGEONCE_LEASE_SECONDS": "5", "CHARGEONCE_SWEEP_SECONDS": "1",
               "PROVIDER_LOG": str(provider_log),
               "PYTHONPATH": examples + os.pathsep + env.get("PYTHONPATH", "")}
    bot_log = open(tmp_path / "bot.log", "w")
    processes.append(subprocess.Popen([sys.executable, os.path.join(examples, "telegram_bot.py")],
                                      env=bot_env, stdout=bot_log, stderr=subprocess.STDOUT))
    wait_for("the bot polls", lambda: api.sent("getMe"))

    # No worker yet: the job waits, and the queue notice comes.
    api.press(chat, 18, "upscale")
    answers = wait_for("the button answered", lambda: api.sent("answerCallbackQuery"))
    assert answers[0].get("text") == "On it!", answers
    job = admin.status(chat).reservation
    assert job is not None and job.request_id == "msg-18-upscale" and job.status == "queued"
    wait_for("you are in the queue", lambda: [m for m in api.sent("sendMessage", chat)
                                              if "in the queue" in m["text"]])

    worker_log = open(tmp_path / "worker.log", "w")
    processes.append(subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "telegram_bot", "worker", "--concurrency=1",
         "--queues=image_generation,image_generation_priority", "--without-gossip", "--without-mingle",
         "--hostname=bot-worker@%h"], env=bot_env, cwd=examples, stdout=worker_log,
        stderr=subprocess.STDOUT))
    wait_for("the picture sent", lambda: [m for m in api.sent("sendMessage", chat)
                                          if "upscaled picture" in m["text"]])
    wait_for("committed", lambda: [e for e in admin.history(chat).entries
                                   if e.cause == "commit" and e.reservation == job.id])

    # The same message's button again: the same job, done; nothing more runs or is charged.
    api.press(chat, 18, "upscale")
    wait_for("the second tap answered", lambda: len(api.sent("answerCallbackQuery")) == 2)
    assert api.sent("answerCallbackQuery")[1].get("text") == "That one is already done or on its way."
    assert provider_log.read_text().splitlines() == [f"chargeonce-{chat}-{job.id}"]
    assert admin.status(chat).balance == 0
    commits = [e for e in admin.history(chat).entries if e.cause == "commit"]
    assert len(commits) == 1
    print("scenario telegram bot: provider_calls=1, charged=1, queue notice sent, "
          "second tap not run")
