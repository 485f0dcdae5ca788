"""Policies are pure functions of (observation, context): what a policy remembers about a robot
lives in that robot's session, travels with each observation, and an episode start clears it for
that robot only."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from controller.errors import ErrorCode
from controller.feed.in_process_feed import InProcessFeed
from controller.feed.inference_feed import Chunk
from controller.feed.served_policy import served_here
from controller.wire.client import TempoClient
from controller.wire.protocol import decode, encode
from policies.base import CameraSpec, Prediction, RobotContext
from policies.demo import make_demo_policy
from policies.tensor_policy import EagerPolicy, TensorPolicy
from tests.conftest import ipc_config, offline_daemon, running_daemon, wait_for

HISTORY = 3
JOINTS = ["a", "b", "c"]
FRAME = np.random.default_rng(0).integers(0, 256, (32, 48, 3), dtype=np.uint8)


def small_act() -> TensorPolicy:
    """A small random ACT that reads the last HISTORY joint states."""
    return make_demo_policy(
        cameras=(("front", 32, 48),),
        joint_names=JOINTS,
        state_size=3,
        chunk_size=8,
        seed=3,
        state_history=HISTORY,
    )


class Recording:
    """Serves `inner` and keeps every (state history, chunk) it was asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def predict(self, images: Any, context: RobotContext) -> Prediction:
        prediction = self.inner.predict(images, context)
        self.calls.append((context.state_history.copy(), prediction.actions.copy()))
        return prediction

    def chunk_for(self, window: np.ndarray) -> list[np.ndarray]:
        """The chunks predicted from `window` (empty until one was)."""
        return [chunk for history, chunk in list(self.calls) if np.array_equal(history, window)]


def test_two_robots_on_one_act_get_chunks_from_their_own_histories(tmp_path) -> None:
    eager = EagerPolicy(small_act())
    policy = Recording(eager)
    config = ipc_config(tmp_path, "control.rate_hz=50")
    # The same newest state, different pasts: only the history tells the robots apart.
    histories = {
        "left": np.array([[0.3, 0.0, 0.0], [0.2, 0.1, 0.0], [0.1, 0.1, 0.1]], np.float32),
        "right": np.array([[-0.3, 0.5, 0.2], [0.0, -0.2, 0.4], [0.1, 0.1, 0.1]], np.float32),
    }
    with running_daemon(config, served_here(policy)):
        clients = {
            name: TempoClient(
                config.server.bind,
                robot=name,
                joints=JOINTS,
                cameras={"front": (32, 48)},
                state_size=3,
            )
            for name in histories
        }
        try:
            for client in clients.values():
                client.connect()
            for row in range(HISTORY):
                for name, client in clients.items():
                    client.send_observation({"front": FRAME.copy()}, histories[name][row])
                time.sleep(0.05)
            chunks = {
                name: wait_for(lambda w=window: policy.chunk_for(w), timeout=20)[0]
                for name, window in histories.items()
            }
        finally:
            for client in clients.values():
                client.close()
    for name, window in histories.items():
        expected = eager.predict_chunk({"front": FRAME}, window)
        np.testing.assert_allclose(chunks[name], expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(chunks["left"], chunks["right"], atol=1e-4)


class Remembering:
    """Serves `inner` and keeps a per-robot call count in the robot's memory, as a planner keeps
    its previous solution; records every context it was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.contexts: list[RobotContext] = []

    def predict(self, images: Any, context: RobotContext) -> Prediction:
        self.contexts.append(context)
        calls = int(context.memory.get("calls", np.zeros(1))[0])
        actions = self.inner.predict(images, context).actions
        return Prediction(actions, memory={"calls": np.array([calls + 1])})


def hello(dispatcher: Any, recorder: Any, identity: bytes, robot: str) -> str:
    spec = {"joints": JOINTS, "cameras": [{"name": "front", "height": 32, "width": 48}]}
    spec["state_size"] = 3
    frames = encode("hello", robot=robot, seq=1, time_ns=0, fields={"spec": spec})
    dispatcher.handle(identity, frames, time.monotonic_ns())
    _, kind, fields, _ = recorder.sent[-1]
    assert kind == "welcome", fields
    return fields["session"]


def observe(
    dispatcher: Any, identity: bytes, session: str, seq: int, state: Any, **extra: Any
) -> None:
    frames = encode(
        "obs",
        robot="r",
        seq=seq,
        time_ns=time.monotonic_ns(),
        fields={"session": session, **extra},
        arrays={"front": FRAME, "state": np.asarray(state, np.float32)},
    )
    dispatcher.handle(identity, frames, time.monotonic_ns())


def test_episode_start_clears_one_robots_plan_history_and_memory_not_the_others(
    tmp_path,
) -> None:
    # Generous watchdog: a slow machine must not turn this into a test of the stale-plan drop.
    config = ipc_config(tmp_path, "guards.hold_after_ms=60000", "guards.stop_after_ms=120000")
    policy = Remembering(EagerPolicy(small_act()))
    dispatcher, loop, recorder, step = offline_daemon(config, policy)
    ids = {"left": b"L", "right": b"R"}
    sessions = {name: hello(dispatcher, recorder, ids[name], name) for name in ids}
    for i in range(4):  # four observations and ticks each: plans, histories and memories grow
        step[0] = i
        for name in ids:
            observe(dispatcher, ids[name], sessions[name], i + 1, [0.1 * i, 0.0, 0.0])
        now = time.monotonic_ns()
        loop.tick(i, now, now)
    left, right = (dispatcher.registry.sessions[sessions[n]] for n in ("left", "right"))
    assert left.memory["calls"][0] == 4 and right.memory["calls"][0] == 4
    assert left.pipeline.plan(4) is not None and right.pipeline.plan(4) is not None
    right_plan = right.pipeline.plan(4)

    step[0] = 4
    observe(dispatcher, ids["left"], sessions["left"], 5, [0.9, 0.9, 0.9], episode_start=True)
    newest = policy.contexts[-1]
    assert newest.episode_start and newest.memory == {} and newest.previous_plan is None
    np.testing.assert_array_equal(newest.state_history, np.full((HISTORY, 3), 0.9, np.float32))
    assert left.episode == 1 and right.episode == 0
    assert left.pipeline.plan(4) is None  # the old plan is gone; the new chunk is not merged
    assert len(left.queues.chunks) == 1 and left.queues.chunks[0].episode == 1
    # The other robot: plan, memory and history untouched.
    np.testing.assert_array_equal(right.pipeline.plan(4).actions, right_plan.actions)
    assert right.memory["calls"][0] == 4 and right.episode_start is False
    observe(dispatcher, ids["right"], sessions["right"], 5, [0.4, 0.0, 0.0])
    newest = policy.contexts[-1]
    assert not newest.episode_start and newest.memory["calls"][0] == 4
    assert newest.previous_plan is not None and newest.previous_plan.start_step == 4
    np.testing.assert_allclose(newest.state_history[:, 0], [0.2, 0.3, 0.4], atol=1e-6)


def test_a_chunk_of_an_ended_episode_is_dropped(tmp_path) -> None:
    config = ipc_config(tmp_path)
    dispatcher, loop, recorder, step = offline_daemon(config, EagerPolicy(small_act()))
    session_id = hello(dispatcher, recorder, b"L", "left")
    observe(dispatcher, b"L", session_id, 1, [0.0, 0.0, 0.0])
    session = dispatcher.registry.sessions[session_id]
    stale = session.queues.chunks.popleft()  # still computing when the episode ends, say
    observe(dispatcher, b"L", session_id, 2, [0.5, 0.0, 0.0], episode_start=True)
    session.queues.chunks.appendleft(stale)
    now = time.monotonic_ns()
    loop.tick(0, now, now)
    assert session.counters["chunks_of_ended_episode"] == 1
    assert session.episode == 1


def test_an_episode_start_reaches_the_policy_even_when_its_request_was_replaced(
    tmp_path,
) -> None:
    """Inference slower than a tick: the flagged observation's request is replaced in the
    mailbox before the worker takes it. The flag means 'no chunk of this episode yet', so the
    newer request carries it, until a chunk of the episode comes back."""
    policy = EagerPolicy(small_act())
    worker = InProcessFeed(policy)  # not started: requests wait in the mailbox
    config = ipc_config(tmp_path, "guards.hold_after_ms=60000", "guards.stop_after_ms=120000")
    dispatcher, loop, recorder, step = offline_daemon(config, policy, worker)
    session_id = hello(dispatcher, recorder, b"L", "left")
    session = dispatcher.registry.sessions[session_id]
    # As if the session's first episode were well under way: a chunk of it came back.
    actions = np.zeros((policy.spec.chunk_size, policy.spec.action_dim), np.float32)
    memory = {"calls": np.array([7])}
    session.queues.chunks.append(Chunk(0, actions, 0, 0, 0, session.episode, memory))
    session.land_chunks(0)
    assert session.episode_start is False and session.memory["calls"][0] == 7
    for seq, flag in ((1, True), (2, False), (3, False)):
        step[0] = seq
        observe(dispatcher, b"L", session_id, seq, [0.1 * seq, 0, 0], episode_start=flag)
    assert session.queues.requests.replaced == 2
    waiting = session.queues.requests.peek()
    assert waiting.context.episode_start and waiting.context.memory == {}
    worker.start()
    try:
        wait_for(lambda: session.queues.chunks, timeout=20)
    finally:
        worker.stop()
    now = time.monotonic_ns()
    loop.tick(4, now, now)  # the episode's first chunk lands
    step[0] = 4
    observe(dispatcher, b"L", session_id, 4, [0.5, 0, 0])
    assert not session.queues.requests.peek().context.episode_start


def test_the_policys_memory_is_copied_and_read_only_to_it(tmp_path) -> None:
    buffer = np.zeros(2)

    class Reusing(Remembering):
        def predict(self, images: Any, context: RobotContext) -> Prediction:
            prediction = super().predict(images, context)
            buffer[:] = prediction.memory["calls"][0]
            return Prediction(prediction.actions, memory={"buffer": buffer})

    config = ipc_config(tmp_path)
    policy = Reusing(EagerPolicy(small_act()))
    dispatcher, loop, recorder, step = offline_daemon(config, policy)
    session_id = hello(dispatcher, recorder, b"L", "left")
    observe(dispatcher, b"L", session_id, 1, [0.0, 0.0, 0.0])
    now = time.monotonic_ns()
    loop.tick(0, now, now)
    kept = dispatcher.registry.sessions[session_id].memory["buffer"]
    buffer[:] = 99.0  # the policy reuses its buffer for another robot
    assert kept[0] == 1.0
    observe(dispatcher, b"L", session_id, 2, [0.0, 0.0, 0.0])
    with pytest.raises(TypeError):
        policy.contexts[-1].memory["buffer"] = np.zeros(1)  # type: ignore[index]


def test_a_version_1_driver_is_told_in_version_1_to_upgrade(tmp_path) -> None:
    config = ipc_config(tmp_path)
    from policies.reach import build_reach_policy

    policy = EagerPolicy(
        build_reach_policy(JOINTS, [CameraSpec(name="front", height=32, width=48)])
    )
    dispatcher, _, recorder, _ = offline_daemon(config, policy)
    frames = encode("hello", robot="old", seq=1, time_ns=0, fields={"spec": {}})
    frames[0] = frames[0].replace(b"\xa7version\x02", b"\xa7version\x01")
    dispatcher.handle(b"old", frames, time.monotonic_ns())
    identity, kind, fields, _ = recorder.sent[-1]
    assert kind == "error" and fields["code"] == ErrorCode.VERSION.value
    assert "version 1 is not supported" in fields["message"]
    assert "episode" in fields["message"] and "upgrade" in fields["message"]
    assert recorder.versions[-1] == 1  # in the driver's own version, so it can read it


def test_the_reply_to_an_old_driver_decodes_as_version_1(monkeypatch) -> None:
    from controller.errors import ProtocolError
    from controller.wire import header_schema

    frames = encode(
        "error",
        robot="tempo",
        seq=1,
        time_ns=0,
        fields={"code": "version", "message": "upgrade"},
        version=1,
    )
    with pytest.raises(ProtocolError) as refused:
        decode(frames)  # today's decoder refuses it: it is in the old client's version
    assert refused.value.reply_version == 1
    monkeypatch.setattr(header_schema, "PROTOCOL_VERSION", 1)  # a version-1 client's decoder
    message = decode(frames)
    assert message.kind == "error" and message.header["message"] == "upgrade"
