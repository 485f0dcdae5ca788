"""`tempo mark`'s command: asked on one thread, kept by another (the loop's) for the robots it
names; an ask the loop does not take in time is refused and never kept later."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from controller.daemon import operator_marks
from controller.daemon.operator_marks import OperatorMarks


@dataclass
class _Session:
    robot: str


class _Marker:
    def __init__(self, refuse: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.kept: list[tuple[str, str, str]] = []
        self.refuse = refuse

    def keep_mark(self, session: Any, reason: str, now_ns: int, by: str) -> str | None:
        if session.robot in self.refuse:
            return "refused for the test"
        self.kept.append((session.robot, reason, by))
        return None


def _ask_while_a_loop_takes(marks: OperatorMarks, marker: _Marker, request: dict) -> dict:
    robots = [_Session("arm0"), _Session("arm1")]
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            if marks.waiting:
                marks.take(((marker, s) for s in robots), time.monotonic_ns())
            time.sleep(0.001)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        return marks.command(request)
    finally:
        stop.set()
        thread.join(2)


def test_the_loop_keeps_the_mark_for_the_named_robot_or_every_robot() -> None:
    marks, marker = OperatorMarks(), _Marker(refuse={"arm1"})
    one = _ask_while_a_loop_takes(marks, marker, {"robot": "arm0", "reason": "slip"})
    assert one == {"mark": {"kept": ["arm0"], "refused": {}}}
    every = _ask_while_a_loop_takes(marks, marker, {})
    assert every == {"mark": {"kept": ["arm0"], "refused": {"arm1": "refused for the test"}}}
    assert marker.kept == [
        ("arm0", "slip", "an operator"),
        ("arm0", "operator mark", "an operator"),
    ]


def test_an_ask_the_loop_does_not_take_in_time_is_refused_and_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(operator_marks, "TAKE_WAIT_S", 0.05)
    marks, marker = OperatorMarks(), _Marker()
    reply = marks.command({"robot": "arm0", "reason": "late"})
    assert "did not take the mark" in reply["error"] and "nothing was marked" in reply["error"]
    marks.take([(marker, _Session("arm0"))], time.monotonic_ns())  # the loop, later
    assert marker.kept == [] and not marks.waiting


@pytest.mark.parametrize(
    "request_, fragment",
    [({"robot": 3}, "robot's name"), ({"reason": ""}, "some text"), ({"reason": b"x"}, "string")],
)
def test_a_malformed_ask_is_refused_before_the_loop_sees_it(request_: dict, fragment: str) -> None:
    marks = OperatorMarks()
    assert fragment in marks.command(request_)["error"] and not marks.waiting
