"""The one seam between a robot's tick and the flight recorder: what each session tells its
observer (its hello, observations, episodes, requests, chunks, commands and marks), called from
the dispatcher, the feed's requests, the session's chunks and the loop. With record.mode off a
session's observer is NOT_RECORDED, which keeps nothing, so no caller asks whether it records.

    controller.record.queue.RobotRecording   puts each on the recorder's queue
    NOT_RECORDED                             keeps nothing; refuses marks in one sentence
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np


class TickObserver(Protocol):
    """What one robot's session reports as its ticks go (each call cheap: the tick's path)."""

    def hello(self, task: str | None) -> None: ...

    def observation(
        self,
        obs_seq: int,
        step: int,
        received_ns: int,
        driver_time_ns: int,
        images: Mapping[str, np.ndarray],
        state: np.ndarray,
        teleop: np.ndarray | None,
        episode: int,
    ) -> None: ...

    def episode(self, episode: int, step: int, task: str | None) -> None: ...

    def request(self, request: Any) -> None: ...

    def chunk(self, chunk: Any, step: int, late_steps: int | None) -> None: ...

    def command(
        self,
        step: int,
        now_ns: int,
        reason: str | None,
        proposed: np.ndarray | None,
        command: np.ndarray | None,
        teleop_joints: Sequence[str],
    ) -> None: ...

    def mark_refused(self, now_ns: int) -> str | None:
        """Why a mark now is not kept (one sentence), or None: `mark` follows."""
        ...

    def mark(self, reason: str, now_ns: int) -> None: ...


class _NotRecorded:
    """record.mode off: every report is dropped where it is made; a mark is refused."""

    __slots__ = ()

    def hello(self, task: str | None) -> None:
        pass

    def observation(
        self,
        obs_seq: int,
        step: int,
        received_ns: int,
        driver_time_ns: int,
        images: Mapping[str, np.ndarray],
        state: np.ndarray,
        teleop: np.ndarray | None,
        episode: int,
    ) -> None:
        pass

    def episode(self, episode: int, step: int, task: str | None) -> None:
        pass

    def request(self, request: Any) -> None:
        pass

    def chunk(self, chunk: Any, step: int, late_steps: int | None) -> None:
        pass

    def command(
        self,
        step: int,
        now_ns: int,
        reason: str | None,
        proposed: np.ndarray | None,
        command: np.ndarray | None,
        teleop_joints: Sequence[str],
    ) -> None:
        pass

    def mark_refused(self, now_ns: int) -> str | None:
        return "this daemon records nothing (record.mode is off), so the mark was not kept"

    def mark(self, reason: str, now_ns: int) -> None:
        pass


NOT_RECORDED: TickObserver = _NotRecorded()
