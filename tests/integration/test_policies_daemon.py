"""Several policies in one daemon (`policies:`), and admission by capacity, in this process:
hello's `policy` picks the policy (its spec, pipeline and feed), an unknown name is refused with
the names served, server.max_robots counts every policy's robots, status has a line per
policy; a policy refuses the robot past its capacity with the numbers and keeps its robots."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from controller.config import TempoConfig, policy_views
from controller.daemon.service import Daemon
from controller.errors import HandshakeRefused
from controller.inference.build import build_policy
from controller.observe.status_view import render_status
from controller.wire.client import TempoClient
from controller.wire.protocol import decode, encode
from tests.conftest import ipc_config, wait_for

SIX = [f"joint_{i}" for i in range(6)]
THREE = ["x", "y", "z"]
FRONT = {"front": (96, 128)}
# Robots in these tests pause while others are refused: their sessions must not time out.
PATIENT = ("server.session_timeout_s=60", "server.idle_when_full_s=60")
TWO_POLICIES = (
    "policies=[{name: arm, policy: {kind: reach}}, "
    "{name: gripper, policy: {kind: reach}, robot: {joints: [x, y, z]}}]"
)


@contextmanager
def serving(config: TempoConfig, wrap: Any = None) -> Iterator[Daemon]:
    policies = [
        build_policy(view.policy, view.robot, view.runner) for _, view in policy_views(config)
    ]
    daemon = Daemon(config, [wrap(p) if wrap else p for p in policies])
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def client(daemon: Daemon, robot: str, joints: list[str], **kwargs: Any) -> TempoClient:
    return TempoClient(
        daemon.endpoint,
        robot,
        joints,
        FRONT,
        len(joints),
        handshake_timeout_s=10,
        silence_reconnect_s=60,
        **kwargs,
    )


def refusal(daemon: Daemon, joints: list[str], **kwargs: Any) -> HandshakeRefused:
    with pytest.raises(HandshakeRefused) as info, client(daemon, "refused", joints, **kwargs):
        pass  # entering connects
    return info.value


def served(clients: list[TempoClient], actions: int = 5) -> None:
    """Every client streams until it has had `actions` more actions."""
    counts = [0] * len(clients)

    def all_served() -> bool:
        for robot in clients:
            robot.send_observation({"front": np.zeros((96, 128, 3), np.uint8)},
                                   np.zeros(len(robot.spec["joints"]), np.float32))  # fmt: skip
        for k, robot in enumerate(clients):
            counts[k] += robot.receive(timeout_s=0.01).kind == "action"
        return min(counts) >= actions

    wait_for(all_served, timeout=30, interval=0.0)


def test_hello_picks_the_policy_by_name_and_unknown_names_are_refused(tmp_path: Path) -> None:
    config = ipc_config(
        tmp_path, "control.rate_hz=50", "server.max_robots=3", TWO_POLICIES, *PATIENT
    )
    with serving(config) as daemon, ExitStack() as stack:
        default = stack.enter_context(client(daemon, "a0", SIX))
        named = stack.enter_context(client(daemon, "g0", THREE, policy="gripper"))
        assert default.welcome is not None and named.welcome is not None
        assert default.welcome.spec["joints"] == SIX  # no name: the first policy
        assert named.welcome.spec["joints"] == THREE
        served([default, named])

        unknown = refusal(daemon, SIX, policy="wrist")
        assert unknown.code == "not_allowed"
        assert "serves no policy named 'wrist'; it serves 'arm', 'gripper'" in str(unknown)
        mismatch = refusal(daemon, SIX, policy="gripper")  # the gripper's spec is checked
        assert mismatch.code == "spec_mismatch" and "['x', 'y', 'z']" in str(mismatch)

        status = daemon.status()
        assert {n: p["robots"] for n, p in status["policies"].items()} == {"arm": 1, "gripper": 1}
        assert {r["robot"]: r["policy"] for r in status["robots"]} == {"a0": "arm", "g0": "gripper"}
        assert status["policies"]["gripper"]["actions_sent"] > 0
        assert status["actions_sent"] == sum(p["actions_sent"] for p in status["policies"].values())
        text = render_status(status)
        assert "policy arm: 1 robot at 50 Hz" in text and "policy gripper: 1 robot at 50 Hz" in text

        stack.enter_context(client(daemon, "a1", SIX))  # the third robot of three
        full = refusal(daemon, THREE, policy="gripper")  # max_robots counts both policies
        assert full.code == "full" and "already serves 3 robots" in str(full)
        served([default, named])  # the refusals disturbed nobody


def _hello(socket: zmq.Socket, joints: list[str], policy: str | None) -> dict[str, Any]:
    """Say hello on this one connection (naming `policy`, or none); the welcome's or error's
    header."""
    cameras = [{"name": "front", "height": 96, "width": 128}]
    spec = {"joints": joints, "cameras": cameras, "state_size": len(joints)}
    fields: dict[str, Any] = {"spec": spec}
    if policy is not None:
        fields["policy"] = policy
    socket.send_multipart(encode("hello", robot="mover", seq=1, time_ns=1, fields=fields))
    while True:
        assert socket.poll(10_000), "no answer to hello"
        header = decode(socket.recv_multipart()).header
        if header["kind"] in ("welcome", "error"):
            return header


@contextmanager
def _connection(daemon: Daemon) -> Iterator[zmq.Socket]:
    """One driver connection, raw (to say hello twice on it)."""
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.connect(daemon.endpoint)
    try:
        yield socket
    finally:
        socket.close(linger=0)


def test_a_second_hello_naming_another_policy_moves_the_connection(tmp_path: Path) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=50", TWO_POLICIES, *PATIENT)
    with serving(config) as daemon, _connection(daemon) as socket:
        assert _hello(socket, THREE, "gripper")["kind"] == "welcome"
        assert _robots(daemon)["gripper"] == 1
        moved = _hello(socket, SIX, "arm")  # the same connection, the other policy
        assert moved["kind"] == "welcome" and moved["spec"]["joints"] == SIX
        assert _robots(daemon) == {"arm": 1, "gripper": 0}  # its gripper session ended


def _robots(daemon: Daemon) -> dict[str, int]:
    return {name: p["robots"] for name, p in daemon.status()["policies"].items()}


def test_a_second_hello_without_a_name_goes_to_the_default_policy(tmp_path: Path) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=50", TWO_POLICIES, *PATIENT)
    with serving(config) as daemon, _connection(daemon) as socket:
        assert _hello(socket, THREE, "gripper")["kind"] == "welcome"
        again = _hello(socket, SIX, None)  # no name: the daemon's default, not the last one
        assert again["kind"] == "welcome" and again["spec"]["joints"] == SIX
        assert _robots(daemon) == {"arm": 1, "gripper": 0}


def test_a_refused_move_to_another_policy_keeps_the_session_it_had(tmp_path: Path) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=50", TWO_POLICIES, *PATIENT)
    with serving(config) as daemon, _connection(daemon) as socket:
        assert _hello(socket, THREE, "gripper")["kind"] == "welcome"
        refused = _hello(socket, THREE, "arm")  # the arm's spec does not match: refused
        assert refused["kind"] == "error" and refused["code"] == "spec_mismatch"
        assert _robots(daemon) == {"arm": 0, "gripper": 1}  # nothing changed


class MeasuredAt4ms:
    """A served policy whose runner reports a measured step of 4 ms (as if on a slow device),
    so admission's arithmetic is fixed: at 50 Hz each robot needs 0.2 of its time."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def status(self) -> dict[str, Any]:
        tiers = [{"name": "eager_fp32", "step_s": 0.004}]
        return {**self._inner.status(), "tier": "eager_fp32", "tiers": tiers, "buckets": []}


def test_the_robot_past_capacity_is_refused_with_numbers_and_the_others_keep_going(
    tmp_path: Path,
) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=50", "execution.max_load=0.9", *PATIENT)
    with serving(config, MeasuredAt4ms) as daemon, ExitStack() as stack:
        robots = [stack.enter_context(client(daemon, f"r{k}", SIX)) for k in range(4)]
        served(robots)
        refused = refusal(daemon, SIX)
        assert refused.code == "full"
        assert (
            "policy 'default' cannot take another robot: serving 4 robots needing 0.80 of its "
            "inference time, one more needs 1.00, it can give 0.90 (execution.max_load)"
        ) in str(refused)
        served(robots)  # the four served are undisturbed
        status = daemon.status()["policies"]["default"]
        assert status["robots"] == 4 and status["load"] == pytest.approx(0.8)
        assert "load 0.80 of 0.90" in render_status(daemon.status())
        # A name the one policy does not have is refused; its own name is served.
        assert "it serves 'default'" in str(refusal(daemon, SIX, policy="act"))


class TierByJoints:
    """A served policy whose status names a tier of its own (tier-<joints>), so a recording
    shows whose tier each chunk was stamped with."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def status(self) -> dict[str, Any]:
        return {**self._inner.status(), "tier": f"tier-{len(self._inner.spec.joint_names)}"}


def test_every_policys_robots_are_recorded_with_their_own_joints_and_tier(tmp_path: Path) -> None:
    from controller.record.reading import read_recording

    folder = tmp_path / "recordings"
    config = ipc_config(tmp_path, "control.rate_hz=50", TWO_POLICIES, *PATIENT,
                        "record.mode=continuous", f"record.dir={folder}")  # fmt: skip
    with serving(config, TierByJoints) as daemon, ExitStack() as stack:
        arm = stack.enter_context(client(daemon, "a0", SIX))
        gripper = stack.enter_context(client(daemon, "g0", THREE, policy="gripper"))
        served([arm, gripper])
    (path,) = folder.glob("*.mcap")
    messages = read_recording(path).messages
    sessions = {m.robot: m.data for m in messages if m.name == "session"}
    assert sessions["a0"]["policy"] == "arm" and sessions["a0"]["joints"] == SIX
    assert sessions["g0"]["policy"] == "gripper" and sessions["g0"]["joints"] == THREE
    for robot, width in (("a0", 6), ("g0", 3)):
        commands = [m.data for m in messages if m.robot == robot and m.name == "command"]
        assert commands and all(len(c["action"] or [0] * width) == width for c in commands)
        chunks = [m.data for m in messages if m.robot == robot and m.name == "chunk"]
        assert chunks and {c["tier"] for c in chunks} == {f"tier-{width}"}
