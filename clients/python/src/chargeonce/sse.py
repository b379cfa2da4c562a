# SPDX-License-Identifier: Apache-2.0
"""Server-Sent Events: framing, and the per-stream filter that drops
repeated durable events."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import List, Optional, Union

from .errors import UnexpectedResponseError
from .models import Event

_EOL = re.compile(rb"\r\n|\n|\r")


@dataclass(frozen=True)
class Comment:
    """A line starting with ":" (the server's ": subscribed" and its
    keep-alive every second)."""
    text: str


@dataclass(frozen=True)
class Message:
    """One dispatched message: its `event:`, joined `data:` lines and `id:`."""
    event: str
    data: str
    id: Optional[str]


class SseParser:
    """Turns the stream's bytes, in chunks cut anywhere, into its messages.
    Lines end in LF, CRLF or CR; a blank line ends a message; `data:` lines
    are joined with LF; other fields are ignored (the HTML standard's rules,
    without its retry handling: the client decides when to reconnect)."""

    def __init__(self) -> None:
        self._pending = b""
        self._event = ""
        self._data: List[str] = []
        self._id: Optional[str] = None
        self._has_fields = False

    def feed(self, chunk: bytes) -> List[Union[Comment, Message]]:
        """Feeds the next chunk; returns the messages it completed, in order."""
        self._pending += chunk
        out: List[Union[Comment, Message]] = []
        while True:
            m = _EOL.search(self._pending)
            if m is None:
                break
            # A CR at the very end may be the first half of a CRLF: wait for the next byte.
            if m.group() == b"\r" and m.end() == len(self._pending):
                break
            line = self._pending[:m.start()].decode("utf-8", "replace")
            self._pending = self._pending[m.end():]
            message = self._line(line)
            if message is not None:
                out.append(message)
        return out

    def _line(self, line: str) -> Optional[Union[Comment, Message]]:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return Comment(line[1:].lstrip(" "))
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        self._has_fields = True
        return None

    def _dispatch(self) -> Optional[Message]:
        if not self._has_fields:
            return None
        message = Message(self._event, "\n".join(self._data), self._id)
        self._event, self._data, self._id, self._has_fields = "", [], None, False
        return message


class EventFilter:
    """What one stream delivers: events in order, each durable one once.
    A replay after Last-Event-ID, or the server's at-least-once delivery,
    may repeat an id; those at or below the highest seen are dropped."""

    def __init__(self, after_id: Optional[int] = None) -> None:
        self.subscribed = False
        self._highest = after_id

    def accept(self, message: Union[Comment, Message]) -> Optional[Event]:
        """The event `message` stands for, or None (a comment, an empty
        message, a repeat)."""
        if isinstance(message, Comment):
            self.subscribed = self.subscribed or message.text == "subscribed"
            return None
        if message.data == "":
            return None  # the standard dispatches no event without data
        try:
            data = json.loads(message.data)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise UnexpectedResponseError(
                f"an event whose data is not a JSON object: {message.data[:200]}", 200)
        event = Event.from_frame(message.event, data, message.id)
        if event.event_id is not None:
            if self._highest is not None and event.event_id <= self._highest:
                return None
            self._highest = event.event_id
        return event
