"""One seam for the recorder (issue 50, item 4): every report of a robot's tick goes to its
session's observer (controller.record.tick_observer), from the dispatcher, the feed's requests,
the session's chunks and the loop; with record.mode off the observer keeps nothing, and no part
of the daemon asks whether anything is recorded."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from controller.record.tick_observer import NOT_RECORDED, TickObserver
from controller.wire.protocol import encode
from policies.base import CameraSpec, PolicySpec, Prediction
from tests.conftest import ipc_config, offline_daemon

JOINTS = [f"joint_{i}" for i in range(3)]
SPEC = {"joints": JOINTS, "cameras": [{"name": "front", "height": 8, "width": 8}],
        "state_size": 3}  # fmt: skip
S = 1_000_000_000
ROOT = Path(__file__).resolve().parents[2]


class Still:
    spec = PolicySpec(
        cameras=(CameraSpec(name="front", height=8, width=8),),
        state_size=3,
        joint_names=tuple(JOINTS),
        chunk_size=10,
    )

    def predict(self, images: Any, context: Any) -> Prediction:
        return Prediction(np.tile(context.state, (10, 1)).astype(np.float32))


class Reports:
    """An observer that lists what it was told (a TickObserver, as RobotRecording is)."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def hello(self, task: str | None) -> None:
        self.told.append("hello")

    def observation(self, *args: Any) -> None:
        self.told.append("observation")

    def episode(self, episode: int, step: int, task: str | None) -> None:
        self.told.append("episode")

    def request(self, request: Any) -> None:
        self.told.append("request")

    def chunk(self, chunk: Any, step: int, late_steps: int | None) -> None:
        self.told.append("chunk")

    def command(self, step: int, now_ns: int, reason: str | None, *rest: Any) -> None:
        self.told.append("command" if reason is None else f"hold:{reason}")

    def mark_refused(self, now_ns: int) -> str | None:
        self.told.append("mark_refused")
        return None

    def mark(self, reason: str, now_ns: int) -> None:
        self.told.append(f"mark:{reason}")


class Observers:
    """What the registry asks for each robot's session (as the recorder's PolicyRecording)."""

    def __init__(self) -> None:
        self.by_robot: dict[str, Reports] = {}

    def robot(self, robot: str, session: str) -> TickObserver:
        return self.by_robot.setdefault(robot, Reports())


def _send(dispatcher: Any, kind: str, now_ns: int, seq: int, arrays: Any = None, **fields: Any):
    frames = encode(kind, robot="arm", seq=seq, time_ns=now_ns, fields=fields,
                    arrays=arrays or {})  # fmt: skip
    dispatcher.handle(b"arm", frames, now_ns)


def _hello(dispatcher: Any, sent: Any, now_ns: int) -> str:
    _send(dispatcher, "hello", now_ns, 1, spec=SPEC)
    _, kind, fields, _ = sent.sent[-1]
    assert kind == "welcome", fields
    return fields["session"]


def test_every_report_of_a_robots_tick_reaches_its_observer(tmp_path: Path) -> None:
    observers = Observers()
    dispatcher, loop, sent, _ = offline_daemon(ipc_config(tmp_path), Still(), flight=observers)
    now = time.monotonic_ns()
    session = _hello(dispatcher, sent, now)
    arrays = {"front": np.zeros((8, 8, 3), np.uint8), "state": np.zeros(3, np.float32)}
    _send(dispatcher, "obs", now + 1, 2, arrays, session=session, episode_start=True)
    loop.tick(1, now + S // 50, now + S // 50)
    _send(dispatcher, "mark", now + 2 * S, 3, session=session, reason="slip")
    told = observers.by_robot["arm"].told
    assert told[:4] == ["hello", "episode", "observation", "request"]
    assert "chunk" in told and "command" in told  # the loop landed the chunk and acted on it
    assert told[-2:] == ["mark_refused", "mark:slip"]


def test_with_recording_off_a_mark_is_refused_in_one_sentence_and_counted(tmp_path) -> None:
    dispatcher, loop, sent, _ = offline_daemon(ipc_config(tmp_path), Still())
    now = time.monotonic_ns()
    session = _hello(dispatcher, sent, now)
    assert dispatcher.registry.sessions[session].recording is NOT_RECORDED
    arrays = {"front": np.zeros((8, 8, 3), np.uint8), "state": np.zeros(3, np.float32)}
    _send(dispatcher, "obs", now + 1, 2, arrays, session=session)
    loop.tick(1, now + S // 50, now + S // 50)  # the tick's reports go nowhere, and it acts
    assert any(kind == "action" for _, kind, _, _ in sent.sent)
    _send(dispatcher, "mark", now + S, 3, session=session, reason="slip")
    _, kind, fields, _ = sent.sent[-1]
    assert kind == "error" and fields["code"] == "not_allowed"
    assert "records nothing (record.mode is off)" in fields["message"]
    assert "\n" not in fields["message"]
    assert dispatcher.registry.sessions[session].counters["marks_refused"] == 1


def test_no_part_of_the_daemon_asks_whether_anything_is_recorded() -> None:
    """The seam is the observer: a branch on `recording is (not) None` would be a second one."""
    asking = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("controller/daemon", "controller/feed")
        for path in sorted((ROOT / folder).glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "recording is not None" in line or "recording is None" in line
    ]
    assert asking == []
