"""A second driver naming a connected robot (issue 51, finding 3): its hello is refused while the
robot's session is alive, a stale session is replaced, every record names its session, and the
export never mixes two sessions of one robot name into one episode. The dispatcher and the
loop are driven by hand (tests/conftest.py offline_daemon)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.record.reading import read_recording
from controller.record.writer import Recorder
from controller.record_config import RecordConfig
from controller.tools.export_lerobot import recorded_episodes
from controller.wire.protocol import encode
from policies.base import CameraSpec, PolicySpec, Prediction
from tests.conftest import ipc_config, offline_daemon

JOINTS = [f"joint_{i}" for i in range(6)]
SPEC = {
    "joints": JOINTS,
    "cameras": [{"name": "front", "height": 24, "width": 32}],
    "state_size": 6,
}
IMAGE = np.zeros((24, 32, 3), np.uint8)
S = 1_000_000_000


class Still:
    spec = PolicySpec(
        cameras=(CameraSpec(name="front", height=24, width=32),),
        state_size=6,
        joint_names=tuple(JOINTS),
        chunk_size=10,
    )

    def predict(self, images: Any, context: Any) -> Prediction:
        return Prediction(np.tile(context.state, (10, 1)).astype(np.float32))


class Driver:
    """A connection (`identity`) acting as robot `robot`."""

    def __init__(self, daemon: Any, identity: bytes, robot: str = "arm") -> None:
        self.dispatcher, self.loop, self.sent, _ = daemon
        self.identity, self.robot = identity, robot
        self.seq, self.session = 0, ""

    def send(self, kind: str, now_ns: int, arrays: Any = None, **fields: Any) -> list[Any]:
        self.seq += 1
        if kind != "hello":
            fields["session"] = self.session
        frames = encode(kind, robot=self.robot, seq=self.seq, time_ns=now_ns, fields=fields,
                        arrays=arrays or {})  # fmt: skip
        before = len(self.sent.sent)
        self.dispatcher.handle(self.identity, frames, now_ns)
        return [s for s in self.sent.sent[before:] if s[0] == self.identity]

    def hello(self, now_ns: int) -> tuple[str, dict[str, Any]]:
        ((_, kind, fields, _),) = self.send("hello", now_ns, spec=SPEC)
        if kind == "welcome":
            self.session = fields["session"]
        return kind, fields

    def obs(self, now_ns: int) -> list[Any]:
        state = np.zeros(6, np.float32)
        return self.send("obs", now_ns, arrays={"front": IMAGE, "state": state})


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    config = ipc_config(tmp_path, "server.max_robots=4", "server.session_timeout_s=2")
    return offline_daemon(config, Still())


def test_a_second_hello_for_a_connected_robot_is_refused_in_one_sentence(daemon) -> None:
    owner, impostor = Driver(daemon, b"owner"), Driver(daemon, b"impostor")
    now = time.monotonic_ns()
    assert owner.hello(now)[0] == "welcome"
    assert owner.obs(now + 1) == []
    kind, fields = impostor.hello(now + 2)
    assert kind == "error" and fields["code"] == "not_allowed"
    assert "robot arm is connected already" in fields["message"]
    assert "\n" not in fields["message"] and "Traceback" not in fields["message"]
    registry = owner.dispatcher.registry
    assert [s.robot for s in registry.sessions.values()] == ["arm"]  # listed once, the owner's
    assert registry.find(owner.session, b"owner").counters["observations"] == 1
    # The impostor has no session: its observations are refused, never recorded as the arm's.
    impostor.session = owner.session
    refused = impostor.obs(now + 3)
    assert [f["code"] for _, k, f, _ in refused if k == "error"] == ["unknown_session"]
    # The owner saying hello again (a reconnect on its connection) is welcomed; so is another
    # robot name on the impostor's connection.
    assert owner.hello(now + 4)[0] == "welcome"
    assert Driver(daemon, b"impostor", "arm2").hello(now + 5)[0] == "welcome"


def test_a_stale_session_is_replaced_so_a_restarted_driver_gets_back_in(daemon) -> None:
    crashed, restarted = Driver(daemon, b"old"), Driver(daemon, b"new")
    now = time.monotonic_ns()
    crashed.hello(now)
    crashed.obs(now + 1)
    assert restarted.hello(now + S)[0] == "error"  # 1 s idle: still alive, refused
    # Past server.session_timeout_s without an observation (the tick has not expired it yet).
    assert restarted.hello(now + 3 * S)[0] == "welcome"
    registry = restarted.dispatcher.registry
    assert list(registry.sessions) == [restarted.session]
    assert restarted.obs(now + 3 * S + 1) == []


def test_every_record_names_its_session_and_the_export_keeps_sessions_apart(tmp_path) -> None:
    """Two sessions of one robot name, interleaved record by record (what an impostor made
    before its hello was refused): each observation says whose it is, and the export makes one
    episode per session, each holding only its own states, not hundreds of cut ones."""
    recorder = Recorder(RecordConfig(mode="continuous", dir=tmp_path / "rec"), ["a", "b"], 50.0)
    recorder.start()
    first, second = recorder.robot("arm", "session-1"), recorder.robot("arm", "session-2")
    first.hello(None)
    second.hello(None)
    t = 10 * S
    for i in range(40):
        for n, rec in ((1, first), (2, second)):
            state = np.array([n, i], np.float32)
            rec.observation(i, i, t, t, {}, state, None, 0 if n == 1 else 3)
            rec.command(i, t + 1, None, state, state, ())
            t += 10_000_000
    recorder.stop()
    (path,) = sorted((tmp_path / "rec").glob("*.mcap"))
    recording = read_recording(path)
    observations = [m for m in recording.messages if m.name == "observation"]
    assert {m.data["session"] for m in observations} == {"session-1", "session-2"}
    commands = [m for m in recording.messages if m.name == "command"]
    assert {m.data["session"] for m in commands} == {"session-1", "session-2"}
    episodes, _ = recorded_episodes([recording])
    assert len(episodes) == 2
    for episode in episodes:
        owner = 1.0 if episode.session == "session-1" else 2.0
        assert len(episode) == 40
        assert all(state[0] == owner for state in episode.state)
        assert not any(episode.held)  # each observation answered by its own session's command
