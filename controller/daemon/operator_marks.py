"""An operator's mark (`tempo mark`): keep this moment in the flight recording of one robot, or
of every robot, as a driver's own `mark` does (in ring mode its last seconds are written out).

    marks = OperatorMarks()
    status_server.commands["mark"] = marks.command   # the status socket's thread asks
    marks.take(targets, now_ns)                       # the loop's thread, after each tick

The ask is made on the status socket's thread and kept on the loop's thread, which alone
touches sessions and the recording queue's producer end: the status thread queues it and waits
(up to TAKE_WAIT_S) for the loop to say which robots kept it (Dispatcher.keep_mark: the same
checks and the same one-a-second limit as a driver's marks) and which did not, and why.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.daemon.session import Session
from controller.errors import ProtocolError
from controller.wire.header_schema import check_mark_reason

log = logging.getLogger(__name__)

TAKE_WAIT_S = 2.0  # the loop ticks every few ms; past this it is stuck or stopping
DEFAULT_REASON = "operator mark"


class Marker(Protocol):
    def keep_mark(self, session: Session, reason: str, now_ns: int, by: str) -> str | None: ...


@dataclass
class _Ask:
    robot: str | None  # None: every robot
    reason: str
    done: threading.Event = field(default_factory=threading.Event)
    kept: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    given_up: bool = False  # the asker stopped waiting: the loop drops it untaken
    lock: threading.Lock = field(default_factory=threading.Lock)


class OperatorMarks:
    def __init__(self) -> None:
        self._asks: collections.deque[_Ask] = collections.deque()  # appends are atomic

    @property
    def waiting(self) -> bool:
        return bool(self._asks)

    def command(self, request: dict[str, Any]) -> dict[str, Any]:
        """The status socket's `mark` command: {"robot": name or None, "reason": text or
        None}; {"mark": {"kept": [robots], "refused": {robot: why}}} or {"error": why}."""
        robot, reason = request.get("robot"), request.get("reason")
        if robot is not None and (not isinstance(robot, str) or not robot):
            return {"error": "a mark's robot must be a robot's name"}
        if reason is None:
            reason = DEFAULT_REASON
        if not isinstance(reason, str):
            return {"error": "a mark's reason must be a string"}
        try:
            check_mark_reason(reason)
        except ProtocolError as exc:
            return {"error": str(exc)}
        ask = _Ask(robot, reason)
        self._asks.append(ask)
        if not ask.done.wait(TAKE_WAIT_S):
            with ask.lock:
                if not ask.done.is_set():
                    ask.given_up = True
                    return {"error": f"the control loop did not take the mark within "
                                     f"{TAKE_WAIT_S:.0f} s; nothing was marked"}  # fmt: skip
        if not ask.kept and not ask.refused:
            named = f"no robot named {robot!r} is connected" if robot else "no robot is connected"
            return {"error": f"{named}, so nothing was marked"}
        return {"mark": {"kept": ask.kept, "refused": ask.refused}}

    def take(self, targets: Iterable[tuple[Marker, Session]], now_ns: int) -> None:
        """On the loop's thread: keep every waiting mark for the robots it names."""
        sessions = list(targets)
        while self._asks:
            ask = self._asks.popleft()
            with ask.lock:
                try:
                    if not ask.given_up:
                        self._keep(ask, sessions, now_ns)
                finally:
                    ask.done.set()

    @staticmethod
    def _keep(ask: _Ask, sessions: list[tuple[Marker, Session]], now_ns: int) -> None:
        for marker, session in sessions:
            if ask.robot is not None and session.robot != ask.robot:
                continue
            try:
                refused = marker.keep_mark(session, ask.reason, now_ns, by="an operator")
            except Exception:  # on the loop's thread: the loop goes on whatever a mark does
                log.exception("an operator's mark of robot %s failed", session.robot)
                refused = "the daemon could not keep this mark; see its log"
            if refused is None:
                ask.kept.append(session.robot)
            else:
                ask.refused[session.robot] = refused
