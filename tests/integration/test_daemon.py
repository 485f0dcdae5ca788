"""A real daemon and real clients over ZeroMQ ipc:// sockets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from controller.errors import HandshakeRefused
from controller.wire.client import TempoClient
from tests.conftest import ipc_config, running_daemon, wait_for

JOINTS = [f"joint_{i}" for i in range(6)]
CAMERAS = {"front": (96, 128)}


def make_client(config, robot="arm0", joints=JOINTS, cameras=CAMERAS, state_size=6, **kwargs):
    return TempoClient(config.server.bind, robot, joints, cameras, state_size, **kwargs)


def frame(value: int = 0) -> dict[str, np.ndarray]:
    return {"front": np.full((96, 128, 3), value, dtype=np.uint8)}


def stream(client: TempoClient, state: np.ndarray, seconds: float, until: Any = None) -> list:
    """Send observations at ~100 Hz and collect every distinct command received, for
    `seconds`, or, with `until(commands)`, until it holds (failing after 30 s): a loaded
    machine serves fewer ticks per second, so counts are waited for, not expected in a time."""
    import time

    commands: list = []
    end = time.monotonic() + (30.0 if until is not None else seconds)
    while time.monotonic() < end:
        client.send_observation(frame(), state)
        command = client.receive(timeout_s=0.01)
        if not commands or command.step != commands[-1].step or command.kind != commands[-1].kind:
            commands.append(command)
        if until is not None and until(commands):
            return commands
    if until is not None:
        pytest.fail(f"not reached within 30 s: {until.__doc__ or until}; {commands[-5:]}")
    return commands


def count_actions(n: int) -> Any:
    def enough(commands: list) -> bool:
        return sum(c.kind == "action" for c in commands) >= n

    enough.__doc__ = f"{n} actions"
    return enough


def test_handshake_welcome_carries_rate_and_spec(tmp_path):
    config = ipc_config(tmp_path, "control.rate_hz=100")
    with running_daemon(config), make_client(config) as client:
        welcome = client.welcome
        assert welcome.control_hz == 100.0
        assert welcome.spec["joints"] == JOINTS
        assert welcome.spec["cameras"] == [{"name": "front", "height": 96, "width": 128}]
        assert welcome.spec["chunk_size"] == 20
        assert len(welcome.session) == 32


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"joints": JOINTS[::-1]}, "joints"),
        ({"state_size": 7}, "state vector has 7 values"),
        ({"cameras": {"front": (480, 640)}}, "480x640"),
        ({"cameras": {"wrist": (96, 128)}}, "missing ['front']"),
    ],
)
def test_handshake_refused_with_a_sentence(tmp_path, kwargs, fragment):
    config = ipc_config(tmp_path)
    with running_daemon(config) as daemon:
        client = make_client(config, **kwargs)
        with pytest.raises(HandshakeRefused) as refused:
            client.connect()
        assert refused.value.code == "spec_mismatch"
        assert fragment in str(refused.value)
        client.close()
        assert daemon.lanes.default.control.registry.sessions == {}


def test_steady_stream_moves_toward_target(tmp_path):
    config = ipc_config(tmp_path, "control.rate_hz=100", "policy.reach.target=[1, 1, 1, 1, 1, 1]")
    with running_daemon(config) as daemon, make_client(config) as client:
        state = np.zeros(6, dtype=np.float32)
        commands = stream(client, state, 0, until=count_actions(60))
        actions = [c for c in commands if c.kind == "action"]
        # Steps strictly increase, none repeated (however many ticks a loaded machine misses).
        steps = [c.step for c in actions]
        assert steps == sorted(set(steps))
        # The reach policy's first action moves from the state toward 1.0: between the two.
        assert np.all(actions[-1].action > 0) and np.all(actions[-1].action < 1)
        assert actions[-1].deadline_ns > 0
        assert daemon.pacer.step >= steps[-1]


def test_two_robots_have_separate_sessions(tmp_path):
    config = ipc_config(tmp_path, "control.rate_hz=100", "policy.reach.target=[1, 1, 1, 1, 1, 1]")
    with running_daemon(config) as daemon:
        with make_client(config, robot="left") as left, make_client(config, robot="right") as right:
            assert left.welcome.session != right.welcome.session
            low, high = np.zeros(6, np.float32), np.full(6, 0.9, np.float32)
            for _ in range(50):
                left.send_observation(frame(), low)
                right.send_observation(frame(), high)
                left.receive(timeout_s=0.01)
                right.receive(timeout_s=0.01)
            a = wait_for(lambda: (c := left.receive(0.01)).kind == "action" and c)
            b = wait_for(lambda: (c := right.receive(0.01)).kind == "action" and c)
            # Each robot's action is computed from its own state.
            assert np.all(a.action < b.action)
            robots = {r["robot"] for r in daemon.status()["robots"]}
            assert robots == {"left", "right"}


def test_disconnect_and_reconnect(tmp_path):
    config = ipc_config(tmp_path)
    with running_daemon(config) as daemon:
        first = make_client(config)
        first.connect()
        wait_for(lambda: len(daemon.lanes.default.control.registry.sessions) == 1)
        first.close()  # says bye
        wait_for(lambda: len(daemon.lanes.default.control.registry.sessions) == 0)
        with make_client(config) as second:
            stream(second, np.zeros(6, np.float32), 0, until=count_actions(1))


def test_hold_before_first_chunk_and_when_observations_stop(tmp_path):
    config = ipc_config(tmp_path, "control.rate_hz=100")
    with running_daemon(config), make_client(config) as client:
        first = wait_for(lambda: (c := client.receive(0.01)).step >= 0 and c)
        assert first.kind == "hold" and first.reason == "no_observation"
        stream(client, np.zeros(6, np.float32), 0.3)
        # No more observations: the watchdog turns actions into holds.
        stale = wait_for(
            lambda: (
                (c := client.receive(0.01)).kind == "hold" and c.reason == "stale_observation" and c
            ),
            timeout=3,
        )
        assert stale.step > first.step


def test_bad_message_gets_error_and_others_keep_streaming(tmp_path):
    import zmq

    config = ipc_config(tmp_path, "control.rate_hz=100")
    with running_daemon(config) as daemon, make_client(config) as good:
        rogue = zmq.Context.instance().socket(zmq.DEALER)
        rogue.setsockopt(zmq.LINGER, 0)
        rogue.connect(config.server.bind)
        rogue.send_multipart([b"\xc1 not msgpack"])
        assert rogue.poll(2000)
        import msgpack

        reply = msgpack.unpackb(rogue.recv_multipart()[0])
        assert reply["kind"] == "error" and reply["code"] == "malformed"
        assert "msgpack" in reply["message"]
        rogue.close()
        stream(good, np.zeros(6, np.float32), 0, until=count_actions(20))
        assert daemon.lanes.default.control.dispatcher.errors["malformed"] == 1


def test_driver_limits_from_hello_clamp_actions(tmp_path):
    # The reach target is 1.0 for every joint; the robot says joint_0 stops at 0.2.
    config = ipc_config(tmp_path, "control.rate_hz=100", "policy.reach.target=[1, 1, 1, 1, 1, 1]")
    with running_daemon(config):
        with make_client(config, limits={"joint_0": (-0.2, 0.2)}) as client:
            assert client.welcome.limits["joint_0"] == [-0.2, 0.2]
            state = np.full(6, 0.2, np.float32)
            for _ in range(30):
                client.send_observation(frame(), state)
                client.receive(0.01)
            action = wait_for(lambda: (c := client.receive(0.01)).kind == "action" and c).action
            assert action[0] == pytest.approx(0.2)
            assert action[1] > 0.2


def test_driver_limits_naming_unknown_joint_are_refused(tmp_path):
    config = ipc_config(tmp_path)
    with running_daemon(config):
        client = make_client(config, limits={"elbow": (-1.0, 1.0)})
        with pytest.raises(HandshakeRefused) as refused:
            client.connect()
        assert refused.value.code == "not_allowed" and "elbow" in str(refused.value)
        client.close()


def test_explicit_resume_releases_the_stop_state(tmp_path):
    config = ipc_config(
        tmp_path,
        "control.rate_hz=100",
        "guards.hold_after_ms=50",
        "guards.stop_after_ms=100",
        "guards.resume=explicit",
    )
    with running_daemon(config), make_client(config) as client:
        state = np.zeros(6, np.float32)
        wait_for(
            lambda: (
                (client.send_observation(frame(), state), client.receive(0.01))[1].kind == "action"
            )
        )
        wait_for(lambda: client.receive(0.01).reason == "stopped", timeout=3)
        # Fresh observations alone do not resume: still stopped.
        for _ in range(20):
            client.send_observation(frame(), state)
            assert client.receive(0.01).kind == "hold"
        wait_for(
            lambda: (
                (client.send_observation(frame(), state, resume=True), client.receive(0.01))[1].kind
                == "action"
            )
        )


def test_guard_interventions_are_counted_in_status_and_survive_disconnect(tmp_path):
    config = ipc_config(
        tmp_path,
        "control.rate_hz=100",
        "policy.reach.target=[1, 1, 1, 1, 1, 1]",
        "guards.position_limits={joint_0: [-0.1, 0.1]}",
    )
    with running_daemon(config) as daemon:
        with make_client(config) as client:

            def clamped(commands: list) -> bool:
                """more than 10 clamped actions"""
                return daemon.status()["robots"][0]["guards"]["position_clamped"] > 10

            stream(client, np.zeros(6, np.float32), 0, until=clamped)
            live = daemon.status()["robots"][0]["guards"]["position_clamped"]
        wait_for(lambda: not daemon.lanes.default.control.registry.sessions)
        assert daemon.status()["guard_interventions"]["position_clamped"] >= live


def test_after_a_watchdog_stop_no_action_from_the_old_plan_is_sent(tmp_path):
    # Chunks of 200 steps at 100 Hz outlive the 100 ms stop: the old plan would still cover
    # the step when observations resume. It must be dropped, not replayed.
    config = ipc_config(
        tmp_path,
        "control.rate_hz=100",
        "policy.reach.chunk_size=200",
        "guards.hold_after_ms=50",
        "guards.stop_after_ms=100",
    )
    with running_daemon(config) as daemon, make_client(config) as client:
        state = np.zeros(6, np.float32)
        wait_for(
            lambda: (
                (client.send_observation(frame(), state), client.receive(0.01))[1].kind == "action"
            )
        )
        wait_for(lambda: client.receive(0.01).reason == "stopped", timeout=3)
        resumed_seq = client.send_observation(frame(), np.full(6, 0.3, np.float32))
        first = wait_for(lambda: (c := client.receive(0.01)).kind == "action" and c)
        assert first.obs_seq >= resumed_seq  # computed from the fresh observation
        robot = daemon.status()["robots"][0]
        assert robot["counters"]["plans_dropped_after_watchdog"] >= 1
