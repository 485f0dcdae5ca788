"""Refusals of a driver's message: the `error` reply (a code and one sentence), counted per
code and logged at most every few seconds per robot and code, so a driver sending thousands of
bad messages is seen in the log, not spammed into it."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Container
from typing import Any

from controller.daemon.session import Session
from controller.errors import ErrorCode
from controller.observe.log_safety import TEXT_CHARS, LineLimiter, shown
from controller.wire.protocol import Message

log = logging.getLogger(__name__)

MAX_ERROR_TEXT = 1000  # characters; well under the decoders' string limit
# A refusal is logged at most this often per robot and error code; the rest are counted and the
# count goes into the next line.
REFUSAL_LOG_INTERVAL_NS = 10_000_000_000

Sender = Callable[..., bool]  # (identity, kind, *, seq, fields, arrays=None) -> sent?


class Refusals:
    """Sends, counts and logs the daemon's `error` replies (see the module doc)."""

    def __init__(self, send: Sender, sessions: Container[str | None]) -> None:
        """`sessions`: the live session ids; a reply names the message's session if live."""
        self.send = send
        self.sessions = sessions
        self.errors: collections.Counter[str] = collections.Counter()
        self.sent = 0  # the seq of the last `error` sent (each gets the next)
        self._lines = LineLimiter(REFUSAL_LOG_INTERVAL_NS)

    def reply(
        self,
        identity: bytes,
        code: ErrorCode,
        text: str,
        message: Message | None,
        version: int | None = None,
    ) -> None:
        self.errors[code.value] += 1
        self.log(code, text, message)
        if len(text) > MAX_ERROR_TEXT:  # a driver's decoder caps strings; keep the sentence
            text = text[: MAX_ERROR_TEXT - 3] + "..."
        fields: dict[str, Any] = {"code": code.value, "message": text}
        if message is not None:
            fields["ref_seq"] = message.seq
            if message.session in self.sessions:
                fields["session"] = message.session
        self.sent += 1
        if version is None:
            self.send(identity, "error", seq=self.sent, fields=fields)
        else:  # a driver of an older protocol version: in its version, so it can read why
            self.send(identity, "error", seq=self.sent, fields=fields, version=version)

    def log(self, code: ErrorCode, text: str, message: Message | None) -> None:
        """Say in the daemon's log why a robot's message was refused (rate-limited)."""
        robot = message.header.get("robot") if message is not None else None
        # The name and the sentence may carry what the driver sent: escaped, never raw.
        who = shown(robot) if isinstance(robot, str) else "an unidentified driver"
        more = self._lines.due((who, code.value))
        if more is None:
            return
        since = f" ({more} more such refusals since the last line)" if more else ""
        log.warning(
            "refused a message from robot %s (%s): %s%s",
            who,
            code.value,
            shown(text, TEXT_CHARS),
            since,
        )

    def tell_refused(self, session: Session) -> None:
        """Observations the policy refused because of their content (the policy's reference
        fails on them too): each gets an `error` to its robot, like a refusal on arrival."""
        while (refusal := session.take_refusal()) is not None:
            self.errors[refusal.code] += 1
            self.sent += 1
            fields = {
                "code": refusal.code,
                "message": refusal.reason[:MAX_ERROR_TEXT],
                "ref_seq": refusal.obs_seq,
                "session": session.id,
            }
            self.send(session.identity, "error", seq=self.sent, fields=fields)
