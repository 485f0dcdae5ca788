"""The daemon's checks of an observation written in place, on arrival (no sockets, no threads):
the slot must be complete and hold the generation the observation names, the message carries
no frames of its own, and only a session that asked for a ring may name a slot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.daemon.control import build_control
from controller.daemon.execution import resolve_execution
from controller.daemon.service import limits_for, pipeline_factory
from controller.wire.protocol import encode
from controller.wire.slot_ring import SlotFrames, SlotRing
from policies.base import CameraSpec, PolicySpec, Prediction
from tests.conftest import Recorder, ipc_config, sync_worker

JOINTS = ["a", "b", "c"]
HELLO_SPEC = {"joints": JOINTS, "cameras": [{"name": "front", "height": 8, "width": 10}],
              "state_size": 3}  # fmt: skip


class Mean:
    spec = PolicySpec(
        cameras=(CameraSpec(name="front", height=8, width=10),),
        state_size=3,
        joint_names=tuple(JOINTS),
        chunk_size=4,
    )

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def predict(self, images: Any, context: Any) -> Prediction:
        # What it was given, and whether the daemon held the slot meanwhile (not the frames:
        # keeping them would keep the slot held).
        held = not images.ring.free(images.index) if isinstance(images, SlotFrames) else None
        self.seen.append((type(images), getattr(images, "index", None), held))
        value = float(images["front"].mean())
        return Prediction(np.full((4, 3), value, np.float32))


@pytest.fixture
def rig(tmp_path: Path) -> Any:
    config = ipc_config(tmp_path)
    policy = Mean()
    recorder = Recorder()
    control = build_control(
        policy.spec,
        sync_worker(policy),
        recorder,
        lambda: 0,
        pipeline_factory(policy.spec, config),
        control_hz=100.0,
        period_ns=10_000_000,
        valid_ticks=2.0,
        server=config.server.model_copy(update={"session_timeout_s": 5.0}),
        execution=resolve_execution(config.execution, policy.spec)[0],
        limits=limits_for(policy.spec),
        send_prepared=recorder.send_prepared,
        frames_in_place=True,
    )
    yield control.dispatcher, control.loop, recorder, policy
    for session in list(control.registry.sessions.values()):
        control.registry.close(session.id, "test over")


class Driver:
    def __init__(self, rig: Any, in_place: bool) -> None:
        self.dispatcher, self.loop, self.recorder, self.policy = rig
        self.seq = 0
        fields: dict[str, Any] = {"spec": HELLO_SPEC}
        if in_place:
            fields["frames_in_place"] = True
        ((_, kind, welcome, _),) = self.send("hello", fields)
        assert kind == "welcome", welcome
        self.session = welcome["session"]
        self.ring: SlotRing | None = None
        offer = welcome.get("frame_ring")
        if offer is not None:
            parts = [(n, tuple(shape), t) for n, shape, t in offer["parts"]]
            self.ring = SlotRing.attach(offer["path"], parts, offer["slots"])

    def send(self, kind: str, fields: dict[str, Any], arrays: Any = None) -> list[Any]:
        self.seq += 1
        if kind != "hello":
            fields["session"] = self.session
        frames = encode(kind, robot="r", seq=self.seq, time_ns=self.seq, fields=fields,
                        arrays=arrays or {})  # fmt: skip
        before = len(self.recorder.sent)
        self.dispatcher.handle(b"id-%d" % id(self), frames, 1_000 * self.seq)
        return self.recorder.sent[before:]

    def obs(self, slot: Any, arrays: dict[str, Any] | None = None) -> list[Any]:
        state = {"state": np.zeros(3, np.float32)}
        return self.send("obs", {"frame_slot": slot}, {**state, **(arrays or {})})


def codes(sent: list[Any]) -> list[str]:
    return [fields["code"] for _, kind, fields, _ in sent if kind == "error"]


def test_a_written_slot_is_served_from_shared_memory(rig: Any) -> None:
    driver = Driver(rig, in_place=True)
    assert driver.ring is not None and driver.ring.count >= 2
    generation = driver.ring.write(1, {"front": np.full((8, 10, 3), 9, np.uint8)})
    assert codes(driver.obs({"index": 1, "generation": generation})) == []
    # Views of the slot, not a copy, held by the daemon while the policy read them ...
    assert driver.policy.seen == [(SlotFrames, 1, True)]
    session = driver.dispatcher.registry.sessions[driver.session]
    assert session.queues.chunks and float(session.queues.chunks[-1].actions[0, 0]) == 9.0
    assert driver.ring.free(1)  # ... and the driver's again once the daemon dropped them


def test_a_slot_sent_before_it_was_written_is_refused_on_arrival(rig: Any) -> None:
    driver = Driver(rig, in_place=True)
    assert driver.ring is not None
    driver.ring.begin(0)  # still writing (odd), yet it names the generation to come
    sent = driver.obs({"index": 0, "generation": driver.ring.generation(0) + 1})
    assert codes(sent) == ["frame_slot"]
    assert "before it had finished writing" in sent[0][2]["message"]
    assert codes(driver.obs({"index": 0, "generation": driver.ring.generation(0)})) == [
        "frame_slot"  # the odd generation itself: never a complete observation
    ]
    assert driver.policy.seen == []
    assert driver.ring.free(0)  # a refused observation holds nothing


def test_an_observation_whose_slot_was_written_again_since_is_dropped_quietly(rig: Any) -> None:
    """The message waited in the socket while the driver came round the ring: a newer
    observation follows it. Dropped and counted, without an error (the driver did right)."""
    driver = Driver(rig, in_place=True)
    assert driver.ring is not None
    old = driver.ring.write(0, {"front": np.zeros((8, 10, 3), np.uint8)})
    driver.ring.write(0, {"front": np.ones((8, 10, 3), np.uint8)})
    assert codes(driver.obs({"index": 0, "generation": old})) == []
    assert driver.policy.seen == []
    session = driver.dispatcher.registry.sessions[driver.session]
    assert session.counters["observations_superseded"] == 1
    assert driver.ring.free(0)


@pytest.mark.parametrize(
    "slot",
    [{"index": 9, "generation": 2}, {"index": 0}, {"index": True, "generation": 2}, {"x": 1}],
)
def test_a_malformed_frame_slot_is_refused(rig: Any, slot: Any) -> None:
    driver = Driver(rig, in_place=True)
    assert codes(driver.obs(slot)) == ["malformed"]


def test_frames_both_in_the_slot_and_in_the_message_are_refused(rig: Any) -> None:
    driver = Driver(rig, in_place=True)
    assert driver.ring is not None
    generation = driver.ring.write(0, {"front": np.zeros((8, 10, 3), np.uint8)})
    arrays = {"front": np.zeros((8, 10, 3), np.uint8)}
    assert codes(driver.obs({"index": 0, "generation": generation}, arrays)) == ["shape"]


def test_a_session_without_a_ring_cannot_name_a_slot_and_gets_none_unasked(rig: Any) -> None:
    driver = Driver(rig, in_place=False)
    assert driver.ring is None
    assert codes(driver.obs({"index": 0, "generation": 2})) == ["not_allowed"]


def test_the_ring_file_goes_with_its_session(rig: Any) -> None:
    driver = Driver(rig, in_place=True)
    assert driver.ring is not None
    path = driver.ring.path
    assert path.exists()
    driver.send("bye", {})
    assert not path.exists()


def test_a_generation_outside_the_slot_header_is_malformed_not_an_internal_error(
    rig: Any,
) -> None:
    driver = Driver(rig, in_place=True)
    assert driver.ring is not None
    for generation in (2**64 - 2, -2):
        assert codes(driver.obs({"index": 0, "generation": generation})) == ["malformed"]
    assert driver.ring.free(0)
