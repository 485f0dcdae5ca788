"""What the daemon accepts from one driver, decided without sockets: its clock, its slot, and
observations the policy cannot use (the dispatcher and the loop driven by hand, tests/conftest.py
offline_daemon). The same cases over real sockets, with a good driver watching, are in
tests/integration/test_hostile.py and test_faults.py."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from controller.errors import InputFault
from controller.wire.protocol import encode
from policies.base import CameraSpec, PolicySpec, Prediction
from tests.conftest import ipc_config, offline_daemon

JOINTS = [f"joint_{i}" for i in range(6)]
SPEC = {
    "joints": JOINTS,
    "cameras": [{"name": "front", "height": 96, "width": 128}],
    "state_size": 6,
}
IMAGE = np.zeros((96, 128, 3), np.uint8)
S = 1_000_000_000  # one second in ns


class Still:
    """A policy that plans to stay where the robot is; refuses a state with 7.0 in it."""

    spec = PolicySpec(
        cameras=(CameraSpec(name="front", height=96, width=128),),
        state_size=6,
        joint_names=tuple(JOINTS),
        chunk_size=10,
    )

    def predict(self, images: Any, context: Any) -> Prediction:
        if (context.state == 7.0).any():
            raise InputFault("the policy's FP32 reference also returns NaN or Inf (test)")
        return Prediction(np.tile(context.state, (10, 1)).astype(np.float32))


class Driver:
    """One driver of the offline daemon: its identity (its robot's name too), session and
    sequence numbers."""

    def __init__(self, daemon: tuple[Any, Any, Any, list[int]], name: bytes) -> None:
        self.dispatcher, self.loop, self.recorder, self.step = daemon
        self.registry = self.dispatcher.registry
        self.identity = name
        self.seq = 0
        self.session = ""

    def send(self, kind: str, now_ns: int, time_ns: int = 1, arrays: Any = None, **fields: Any):
        self.seq += 1
        if kind != "hello":
            fields["session"] = self.session
        frames = encode(
            kind,
            robot=self.identity.decode(),
            seq=self.seq,
            time_ns=time_ns,
            fields=fields,
            arrays=arrays or {},
        )
        before = len(self.recorder.sent)
        self.dispatcher.handle(self.identity, frames, now_ns)
        return [sent for sent in self.recorder.sent[before:] if sent[0] == self.identity]

    def hello(self, now_ns: int) -> str:
        ((_, kind, fields, _),) = self.send("hello", now_ns, spec=SPEC)
        assert kind == "welcome", fields
        self.session = fields["session"]
        return self.session

    def obs(self, now_ns: int, time_ns: int, state: Any = None) -> list[Any]:
        state = np.zeros(6, np.float32) if state is None else np.asarray(state, np.float32)
        return self.send("obs", now_ns, time_ns, arrays={"front": IMAGE, "state": state})


def codes(sent: list[Any]) -> list[str]:
    return [fields["code"] for _, kind, fields, _ in sent if kind == "error"]


@pytest.fixture
def daemon(tmp_path: Any) -> tuple[Any, Any, Any, list[int]]:
    config = ipc_config(
        tmp_path,
        "server.max_robots=2",
        "server.idle_when_full_s=0.5",
        "server.session_timeout_s=2",
    )
    return offline_daemon(config, Still())


def test_a_stamp_far_in_the_future_moves_no_deadline(daemon) -> None:
    driver = Driver(daemon, b"a")
    now = time.monotonic_ns()
    driver.hello(now)
    clock = 5 * S  # the driver's clock: 5 s, while ours reads `now`
    assert driver.obs(now, clock) == []
    session = driver.registry.sessions[driver.session]
    offset = session.clock_offset_ns
    assert offset == clock - now
    # One observation stamped 1000 s ahead is served, but its offset is not believed.
    assert driver.obs(now + S // 100, clock + S // 100 + 1000 * S) == []
    assert session.clock_offset_ns == offset and session.counters["clock_jumps"] == 1
    assert session.counters["observations"] == 2
    driver.loop.tick(1, now + S // 50, now + S // 50)
    actions = [f for _, kind, f, _ in driver.recorder.sent if kind == "action"]
    assert actions, driver.recorder.sent
    # The deadline is within a second of the true one in the driver's clock (it is tens of ms).
    assert abs(actions[-1]["deadline_ns"] - (now + S // 50 + offset)) < S
    # The clock goes on from the believed observation, not the jump: this one is accepted.
    assert driver.obs(now + S // 20, clock + S // 20) == []


def test_time_ns_zero_or_going_backwards_is_refused(daemon) -> None:
    driver = Driver(daemon, b"a")
    now = time.monotonic_ns()
    driver.hello(now)
    assert codes(driver.obs(now, 0)) == ["clock"]
    assert driver.obs(now, 10 * S) == []
    refused = driver.obs(now + 1, 10 * S - 1)
    assert codes(refused) == ["clock"]
    assert "earlier than this session's previous observation" in refused[0][2]["message"]
    session = driver.registry.sessions[driver.session]
    assert session.counters["observations"] == 1 and session.last_obs_seq == driver.seq - 1


def test_a_session_that_never_observes_is_closed_whatever_else_it_sends(daemon) -> None:
    squatter = Driver(daemon, b"s")
    now = time.monotonic_ns()
    squatter.hello(now)
    for i in range(1, 5):  # teleop every half second, never an observation
        assert squatter.send("teleop", now + i * S // 2, joints=[]) == []
        squatter.loop.tick(i, now + i * S // 2, now + i * S // 2)
    assert squatter.session in squatter.registry.sessions  # 2.0 s: not past the timeout yet
    squatter.loop.tick(5, now + 2 * S + S // 10, now + 2 * S + S // 10)
    assert squatter.session not in squatter.registry.sessions


def test_a_full_daemon_gives_an_idle_slot_to_a_new_driver(daemon) -> None:
    now = time.monotonic_ns()
    working, squatter, newcomer = (Driver(daemon, n) for n in (b"w", b"s", b"n"))
    working.hello(now)
    squatter.hello(now)
    for i in range(1, 4):
        working.obs(now + i * S // 4, i * S // 4)
        squatter.send("teleop", now + i * S // 4, joints=[])
    # Every slot taken, the squatter silent for 0.75 s >= idle_when_full_s: it gives way.
    newcomer.hello(now + 3 * S // 4)
    sessions = working.registry.sessions
    assert set(sessions) == {working.session, newcomer.session}
    # A working driver is never evicted: with both slots observing, the next one is `full`.
    newcomer.obs(now + S, S)
    late = Driver(daemon, b"l")
    sent = late.send("hello", now + S + S // 10, spec=SPEC)
    assert codes(sent) == ["full"]


def test_an_observation_the_policy_cannot_use_is_refused_to_its_robot(daemon) -> None:
    driver = Driver(daemon, b"a")
    now = time.monotonic_ns()
    driver.hello(now)
    driver.obs(now, S, state=[0, 0, 7.0, 0, 0, 0])  # the worker runs at once (sync worker)
    sent = driver.recorder.sent
    before = len(sent)
    driver.loop.tick(0, now, now)
    errors = [f for ident, kind, f, _ in sent[before:] if kind == "error"]
    assert [e["code"] for e in errors] == ["unusable_input"]
    assert errors[0]["ref_seq"] == driver.seq and errors[0]["session"] == driver.session
    session = driver.registry.sessions[driver.session]
    assert session.counters["input_faults"] == 1
    assert driver.dispatcher.errors["unusable_input"] == 1
    feed = driver.dispatcher.requests.feed
    assert feed.input_faults == 1 and feed.failures == 0


def test_state_outside_the_spec_bounds_is_refused_naming_the_joint(tmp_path) -> None:
    bounded = Still()
    bounded.spec = Still.spec.model_copy(update={"state_bounds": ((-2.0, 2.0),) * 6})
    driver = Driver(offline_daemon(ipc_config(tmp_path), bounded), b"a")
    now = time.monotonic_ns()
    driver.hello(now)
    refused = driver.obs(now, S, state=[0, 0, 0, 2.5, 0, 0])
    assert codes(refused) == ["out_of_range"]
    message = refused[0][2]["message"]
    assert "state[3] (joint_3) is 2.5, outside [-2, 2]" in message
    assert driver.obs(now + 1, S + 1, state=[0, 0, 0, 1.9, 0, 0]) == []


def test_a_late_first_observation_does_not_expire_a_whole_session(daemon) -> None:
    driver = Driver(daemon, b"a")
    now = time.monotonic_ns()
    driver.hello(now)
    clock = 5 * S
    # The first observation was stuck for 3 s on its way: its offset is 3 s too low.
    driver.obs(now, clock - 3 * S)
    session = driver.registry.sessions[driver.session]
    for i in range(1, 12):  # then on time: the true offset, 3 s above the estimate
        driver.obs(now + i * S // 100, clock + i * S // 100)
    assert session.clock_offset_ns == clock - now  # believed after the confirmations
    assert session.counters["clock_jumps"] == 7  # the first seven were held back
