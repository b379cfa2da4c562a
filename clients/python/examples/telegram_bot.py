#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A Telegram bot that charges once per job, with python-telegram-bot 13
(Debian's python3-python-telegram-bot) and Celery on Redis.

Any message gets a reply with an "Upscale" button. The button's handler
reserves the job's price (its request id names the message and the
button, so a double tap or a redelivered update is the same job) and sends
the Celery task to the queue the reservation names; busy and out of credits
are answered at once. A thread reads chargeonce's event stream and tells
the user "you are in the queue" when the job's queue notice comes (the job
waited longer than the server's queue-notice-delay). The task calls the
provider, sends the result, and is committed when it returns.

    # the bot (gateway token):
    python3 telegram_bot.py
    # its workers (worker token):
    python3 -m celery -A telegram_bot worker \
      -Q image_generation,image_generation_priority,text_generation,text_generation_priority

Environment: TELEGRAM_TOKEN, TELEGRAM_BASE_URL (optional: another Bot API
server, e.g. a local one), CHARGEONCE_URL, CHARGEONCE_GATEWAY_TOKEN
(the bot), CHARGEONCE_WORKER_TOKEN (the workers), CELERY_BROKER
(redis://…), CHARGEONCE_LEASE_SECONDS and CHARGEONCE_SWEEP_SECONDS (the
server's --lease-duration and --sweep-interval: 30 and 60 by default),
PROVIDER_LOG (a file the provider stand-in appends to; tests count it).
"""
import logging
import os
import threading
import time

from celery import Celery
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.ext import CallbackContext, CallbackQueryHandler, Filters, MessageHandler, Updater

from chargeonce import (BusyError, ChargeonceError, Client, InsufficientImagesError,
                        InsufficientMessagesError)
from chargeonce.celery_tasks import billed_task, install

env = os.environ
log = logging.getLogger("telegram_bot")
BASE_URL = env.get("TELEGRAM_BASE_URL")  # None: api.telegram.org


def bot() -> Bot:
    return Bot(env["TELEGRAM_TOKEN"], **({"base_url": BASE_URL} if BASE_URL else {}))


# -- the workers' half ---------------------------------------------------------

app = Celery("telegram_bot", broker=env.get("CELERY_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(task_acks_late=True, task_reject_on_worker_lost=True,
                broker_transport_options={"visibility_timeout": 3600},
                worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True)
install(app, lambda: Client(env["CHARGEONCE_URL"], worker_token=env["CHARGEONCE_WORKER_TOKEN"]),
        lease_duration=float(env.get("CHARGEONCE_LEASE_SECONDS", "30")),
        sweep_interval=float(env.get("CHARGEONCE_SWEEP_SECONDS", "60")))


def call_provider(key: str) -> str:
    """Stands in for the paid API; `key` is its idempotency key."""
    with open(env.get("PROVIDER_LOG", os.devnull), "a") as f:
        f.write(key + "\n")
    return f"picture for {key}"


@billed_task(app, kind="image")
def upscale(job, chat_id: int, message_id: int) -> str:
    job.check()  # cancelled while it waited: stop before paying the provider
    picture = call_provider(job.provider_ref)
    bot().send_message(chat_id, f"Here is your upscaled picture: {picture}",
                       reply_to_message_id=message_id)
    return picture


# -- the bot's half --------------------------------------------------------------

def gateway() -> Client:
    return Client(env["CHARGEONCE_URL"], gateway_token=env["CHARGEONCE_GATEWAY_TOKEN"])


#: Jobs this bot reserved and whose queue notice it has not sent: reservation → chat.
waiting: dict = {}
waiting_lock = threading.Lock()


def on_message(update: Update, context: CallbackContext) -> None:
    keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("Upscale", callback_data="upscale")]])
    update.effective_message.reply_text("What shall I do with it?", reply_markup=keyboard)


def on_button(update: Update, context: CallbackContext) -> None:
    query = update.callback_query
    chat = query.message.chat_id
    # The user's intent: this message's this button. A double tap, or the
    # update delivered again, names the same job.
    request_id = f"msg-{query.message.message_id}-{query.data}"
    client: Client = context.bot_data["chargeonce"]
    try:
        client.touch(chat)
        sent = upscale.reserve_and_send(client, chat, request_id, chat, query.message.message_id)
    except BusyError:
        query.answer("One job at a time: wait for the one running.")
        return
    except (InsufficientImagesError, InsufficientMessagesError):
        query.answer("Out of credits for today.")
        return
    except ChargeonceError as e:  # after the client's retries: tell the user, log the rest
        log.warning("reserve of %s failed: %s", request_id, e)
        query.answer("Billing is unavailable, try again in a minute.")
        return
    if sent.task_id is None:
        query.answer("That one is already done or on its way.")
        return
    with waiting_lock:
        waiting[sent.reservation.id] = chat
    query.answer("On it!")


def notices(client: Client, bot_: Bot, subscribed: threading.Event) -> None:
    """Sends "you are in the queue" on each queue notice of this bot's jobs;
    reopens the stream after the last event id when it ends."""
    last = None
    while True:
        try:
            with client.events(last) as stream:
                subscribed.set()
                for event in stream:
                    last = event.event_id or last
                    if event.event == "queue_notice":
                        with waiting_lock:
                            chat = waiting.pop(event.reservation, None)
                        if chat is not None:
                            bot_.send_message(chat, "You are in the queue; your picture comes soon.")
                    elif event.event == "reservation_released":
                        with waiting_lock:
                            waiting.pop(event.reservation, None)
        except ChargeonceError as e:
            log.warning("event stream: %s; reopening", e)
            time.sleep(1)


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    updater = Updater(env["TELEGRAM_TOKEN"], use_context=True,
                      **({"base_url": BASE_URL} if BASE_URL else {}))
    client = gateway()
    updater.dispatcher.bot_data["chargeonce"] = client
    updater.dispatcher.add_handler(MessageHandler(Filters.text, on_message))
    updater.dispatcher.add_handler(CallbackQueryHandler(on_button))
    # Subscribed before the first reserve, so that no queue notice is missed.
    subscribed = threading.Event()
    threading.Thread(target=notices, args=(gateway(), updater.bot, subscribed), daemon=True).start()
    if not subscribed.wait(30):
        raise SystemExit("chargeonce's event stream did not open")
    updater.start_polling(poll_interval=0.2, timeout=1)
    log.info("polling")
    updater.idle()


if __name__ == "__main__":
    main()
