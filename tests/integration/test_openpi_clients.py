"""openpi-client, unchanged, against a real daemon serving the tiny policy on the CPU: its
WebsocketClientPolicy and ActionChunkBroker for openpi's ALOHA (through an inference process),
DROID and LIBERO (in the daemon's process) layouts; the chunk it gets is the policy's, clamped
by the daemon's joint limits; status lists the client and its counters. Hostile clients:
tests/integration/test_openpi_hostile.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("websockets")
websocket_client_policy = pytest.importorskip("openpi_client.websocket_client_policy")

from controller.config import TempoConfig  # noqa: E402
from controller.inference.build import build_policy  # noqa: E402
from controller.link.remote_policy import RemotePolicy  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.tiny.policy import build_tiny_policy  # noqa: E402
from tests.conftest import ipc_config, running_daemon  # noqa: E402
from tests.integration.openpi_tiny_inference import (  # noqa: E402
    BATCH_SIZES,
    CHUNK,
    HEIGHT,
    SHAPES,
    WIDTH,
    openpi_spec,
)

# openpi-client 0.1.2 opens its connection without a context manager (websockets 14+ warn).
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
CHILD = Path(__file__).with_name("openpi_tiny_inference.py")
RNG = np.random.default_rng(3)
LIMIT = 0.05  # joint_0's position limit in these configs: every chunk is clamped to it


def observation(layout: str, value: int = 0) -> dict[str, Any]:
    """One observation as openpi's example for `layout` sends it (frames at the tiny size)."""
    cameras, state_size, _ = SHAPES[layout]

    def image(channels_first: bool) -> np.ndarray:
        shape = (3, HEIGHT, WIDTH) if channels_first else (HEIGHT, WIDTH, 3)
        return np.full(shape, value, np.uint8)

    state = np.linspace(-0.5, 0.5, state_size) + value / 100
    if layout == "aloha":
        images = {name: image(True) for name in cameras}
        return {"images": images, "state": state, "prompt": "fold the towel"}
    if layout == "droid":
        return {
            "observation/exterior_image_1_left": image(False),
            "observation/wrist_image_left": image(False),
            "observation/joint_position": state[:7],
            "observation/gripper_position": state[7:],
            "prompt": "put the marker in the cup",
        }
    return {
        "observation/image": image(False),
        "observation/wrist_image": image(False),
        "observation/state": state,
        "prompt": "pick up the bowl",
    }


def openpi_config(tmp_path: Path, layout: str, *more: str) -> TempoConfig:
    return ipc_config(
        tmp_path,
        "control.rate_hz=50",
        "server.openpi.enabled=true",
        "server.openpi.bind=127.0.0.1:0",
        f"server.openpi.layout={layout}",
        f"guards.position_limits={{joint_0: [-{LIMIT}, {LIMIT}]}}",
        *more,
    )


def in_process_policy(config: TempoConfig, layout: str) -> Any:
    runner = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=2)
    model = build_tiny_policy(openpi_spec(layout))
    return build_policy(config.policy, config.robot, runner, model=model,
                        batch_sizes=BATCH_SIZES)  # fmt: skip


@pytest.fixture
def aloha_process() -> Iterator[RemotePolicy]:
    policy = RemotePolicy(
        [sys.executable, str(CHILD), "aloha"], standby=False, batching=(BATCH_SIZES, 0)
    )
    policy.start()
    yield policy
    policy.stop()


def client_for(daemon: Any, **kwargs: Any) -> Any:
    """openpi-client's policy as a lab runs it, given the server's address (its one line)."""
    return websocket_client_policy.WebsocketClientPolicy(daemon.openpi_endpoint, **kwargs)


def serve_through_the_broker(daemon: Any, layout: str) -> None:
    """ActionChunkBroker over WebsocketClientPolicy, as openpi's examples run it: one request
    per chunk, each action a row of the policy's chunk (joint_0 clamped to the limit)."""
    broker_module = pytest.importorskip("openpi_client.action_chunk_broker")  # needs dm-tree
    client = client_for(daemon)
    metadata = client.get_server_metadata()
    _, _, joints = SHAPES[layout]
    assert metadata["server"] == "tempo" and metadata["layout"] == layout
    assert metadata["action_horizon"] == CHUNK and metadata["action_dim"] == joints
    broker = broker_module.ActionChunkBroker(client, action_horizon=CHUNK)
    actions = []
    for step in range(2 * CHUNK):
        result = broker.infer(observation(layout, value=step // CHUNK))
        assert result["actions"].shape == (joints,)
        actions.append(result["actions"])
    rows = np.stack(actions)
    assert np.isfinite(rows).all()
    assert np.abs(rows[:, 0]).max() <= LIMIT + 1e-6
    # Two chunks of two observations: rows differ within a chunk and between them.
    assert not np.allclose(rows[0], rows[CHUNK])

    status = daemon.status()
    openpi = status["openpi"]
    assert openpi["chunks_served"] == 2 and openpi["clients"] == 1 and openpi["refused"] == {}
    (listed,) = [r for r in status["robots"] if r.get("client") == "openpi"]
    assert listed["counters"]["observations"] == 2 and listed["sent"] == 2
    assert listed["guards"]["position_clamped"] > 0  # the tiny policy's joint_0 runs past 0.05


def test_the_chunk_is_the_policys_through_the_daemons_limits(tmp_path: Path) -> None:
    """The same observation gives the same chunk as the policy's own, clamped; server_timing
    says the policy's step and the server's time, the second one larger."""
    layout = "libero"
    config = openpi_config(tmp_path, layout)
    policy = in_process_policy(config, layout)
    with running_daemon(config, policy) as daemon:
        client = client_for(daemon)
        first = client.infer(observation(layout, 7))
        again = client.infer(observation(layout, 7))
    chunk = first["actions"]
    assert chunk.shape == (CHUNK, 7) and chunk.dtype == np.float32
    assert np.array_equal(chunk, again["actions"])
    model = build_tiny_policy(openpi_spec(layout))
    import torch

    obs = observation(layout, 7)
    frames = np.stack([obs["observation/image"], obs["observation/wrist_image"]])[None]
    state = obs["observation/state"].astype(np.float32)[None, None]
    with torch.no_grad():
        expected = model.module(torch.from_numpy(frames), torch.from_numpy(state))[0].numpy()
    expected[:, 0] = np.clip(expected[:, 0], -LIMIT, LIMIT)
    np.testing.assert_allclose(chunk, expected, rtol=1e-5, atol=1e-5)
    timing = again["server_timing"]
    assert 0 < timing["infer_ms"] < timing["server_ms"] and timing["prev_total_ms"] > 0


def test_aloha_through_an_inference_process(tmp_path: Path, aloha_process: RemotePolicy) -> None:
    with running_daemon(openpi_config(tmp_path, "aloha"), aloha_process) as daemon:
        serve_through_the_broker(daemon, "aloha")


@pytest.mark.parametrize("layout", ["droid", "libero"])
def test_droid_and_libero_in_the_daemons_process(tmp_path: Path, layout: str) -> None:
    config = openpi_config(tmp_path, layout)
    with running_daemon(config, in_process_policy(config, layout)) as daemon:
        serve_through_the_broker(daemon, layout)


def test_healthz_answers_over_plain_http(tmp_path: Path) -> None:
    import urllib.request

    layout = "libero"
    config = openpi_config(tmp_path, layout)
    with running_daemon(config, in_process_policy(config, layout)) as daemon:
        url = daemon.openpi_endpoint.replace("ws://", "http://") + "/healthz"
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (loopback)
            assert response.status == 200 and response.read() == b"OK\n"


def test_a_restart_of_the_inference_process_is_a_sentence_then_served_again(
    tmp_path: Path, aloha_process: RemotePolicy
) -> None:
    """SIGKILL of the inference process while a client streams: a request in flight, or sent
    while it restarts, is refused in one sentence (openpi-client raises it), none hangs, and
    the restarted process serves the same connection."""
    import os
    import signal
    import time

    from tests.conftest import wait_for

    config = openpi_config(tmp_path, "aloha", "server.openpi.request_timeout_s=20")
    with running_daemon(config, aloha_process) as daemon:
        client = client_for(daemon)
        obs = observation("aloha")
        before = client.infer(obs)["actions"]
        dead = aloha_process.pid
        assert dead is not None
        os.kill(dead, signal.SIGKILL)
        refusals: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                reply = client.infer(obs)
            except RuntimeError as exc:  # the text frame, as openpi-client raises it
                sentence = str(exc).split("\n", 1)[1]
                assert "\n" not in sentence and "Traceback" not in sentence
                refusals.append(sentence)
                time.sleep(0.05)
                continue
            if aloha_process.pid not in (None, dead):
                break  # served by the new process
        else:
            pytest.fail(f"not served again within 120 s; refusals: {refusals[-3:]}")
        wait_for(lambda: aloha_process.serving, 10)
        assert refusals and all("restarting" in sentence for sentence in refusals)
        np.testing.assert_allclose(reply["actions"], before, rtol=1e-5, atol=1e-5)


def test_the_flight_recorder_records_each_client(tmp_path: Path) -> None:
    """A client's observations, requests' chunks and frames are in the recording, under its
    own robot name and session, as a ZeroMQ robot's are (commands: none, the client acts)."""
    import collections

    from controller.record.reading import read_recording

    layout = "libero"
    rec = tmp_path / "rec"
    config = openpi_config(tmp_path, layout, "record.mode=continuous", f"record.dir={rec}")
    with running_daemon(config, in_process_policy(config, layout)) as daemon:
        client = client_for(daemon)
        sent = [client.infer(observation(layout, value))["actions"] for value in (1, 2, 3)]
        from tests.conftest import wait_for

        wait_for(lambda: daemon.status()["recording"]["written"] >= 9, 30)
        # Its robot name is its own while it is connected: no ZeroMQ driver takes it.
        from controller.errors import HandshakeRefused
        from controller.wire.client import TempoClient

        cameras, state_size, joints = SHAPES[layout]
        driver = TempoClient(daemon.endpoint, "openpi-1", [f"joint_{i}" for i in range(joints)],
                             {c: (HEIGHT, WIDTH) for c in cameras}, state_size)  # fmt: skip
        with pytest.raises(HandshakeRefused, match="name of a connected openpi client"):
            driver.connect()
        driver.close()
    (file,) = sorted(rec.glob("tempo-*.mcap"))
    recording = read_recording(file)
    assert recording.problem is None
    by_name: dict[str, list[Any]] = collections.defaultdict(list)
    for message in recording.messages:
        by_name[message.name].append(message.data)
    assert len(by_name["observation"]) == 3 and len(by_name["chunk"]) == 3
    assert not by_name["command"]
    # The chunks recorded are the policy's, before the limits the client's copy went through.
    for chunk, reply in zip(by_name["chunk"], sent, strict=True):
        actions = np.asarray(chunk["actions"], np.float32)
        np.testing.assert_allclose(np.clip(actions[:, 0], -LIMIT, LIMIT), reply[:, 0], atol=1e-6)
        np.testing.assert_allclose(actions[:, 1:], reply[:, 1:], atol=1e-6)
    assert len({m["session"] for m in by_name["observation"]}) == 1


def test_plain_http_requests_open_no_session(tmp_path: Path) -> None:
    """A GET without a websocket upgrade (or any handshake websockets rejects) never reaches the
    connection handler: it must not take a session, else enough of them fill max_robots."""
    import urllib.error
    import urllib.request

    layout = "libero"
    config = openpi_config(tmp_path, layout, "server.openpi.max_connections=2")
    with running_daemon(config, in_process_policy(config, layout)) as daemon:
        url = daemon.openpi_endpoint.replace("ws://", "http://") + "/"
        for _ in range(5):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url, timeout=5)  # noqa: S310 (loopback)
            assert refused.value.code == 426  # Upgrade Required, websockets' answer
        assert daemon.openpi.sessions.count == 0
        policy = client_for(daemon)  # room for the client after all of them
        actions = policy.infer(observation(layout))["actions"]
        assert np.isfinite(actions).all()
