"""`tempo replay`: a recording made by a real daemon, replayed through the same policy in
eager FP32, gives back the chunks that were served (exactly for the tiny policy, within 1e-6
for the flow policy, whose noise is seeded by the step); a cut recording replays as far as it
can be read; one that is not a recording is one sentence."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.cli import main
from controller.inference.build import build_policy, build_runner
from controller.record.reading import read_recording
from controller.runner_config import RunnerConfig
from controller.tools.flight_replay import replay
from controller.wire.client import TempoClient
from policies.tiny.policy import build_tiny_policy, tiny_spec
from tests.conftest import ipc_config, running_daemon, wait_for

JOINTS = [f"joint_{i}" for i in range(6)]
EAGER = RunnerConfig(top_tier="eager_fp32", parity_observations=1)


def _record(
    tmp_path: Path, cameras: dict[str, tuple[int, int]], policy: Any, *overrides: str
) -> Path:
    """Serve `policy` (None: as the config says) with recording on; random frames, a moving
    state, 40 observations or more (until 12 inferences); returns the recording."""
    rec = tmp_path / "rec"
    config = ipc_config(tmp_path, "control.rate_hz=50", "record.mode=continuous",
                        f"record.dir={rec}", *overrides)  # fmt: skip
    if policy is not None:
        policy = build_policy(config.policy, config.robot, EAGER, model=policy)
    rng = np.random.default_rng(1)
    with running_daemon(config, policy) as daemon:
        with TempoClient(config.server.bind, "arm", JOINTS, cameras, 6) as client:
            sent: list[Any] = []

            def served_enough() -> bool:
                shape = lambda hw: (*hw, 3)  # noqa: E731
                frames = {n: rng.integers(0, 256, shape(hw), np.uint8) for n, hw in cameras.items()}
                client.send_observation(frames, np.full(6, 0.01 * len(sent), np.float32))
                sent.append(client.receive(timeout_s=0.02))
                return len(sent) >= 40 and daemon.status()["inferences"] >= 12

            wait_for(served_enough, timeout=90)
    files = sorted(rec.glob("*.mcap"))
    assert len(files) == 1
    return files[0]


def test_the_tiny_policy_replays_exactly(tmp_path) -> None:
    cameras = {"cam0": (48, 64), "cam1": (48, 64)}
    path = _record(tmp_path, cameras, build_tiny_policy(tiny_spec(), seed=3))
    recording = read_recording(path)
    same = replay(recording, build_runner(build_tiny_policy(tiny_spec(), seed=3), EAGER, "cpu"))
    assert len(same.steps) >= 10 and "frames not recorded" not in same.skipped
    assert same.largest == 0.0
    # The comparison is real: other weights differ.
    other = replay(recording, build_runner(build_tiny_policy(tiny_spec(), seed=4), EAGER, "cpu"))
    assert other.largest > 1e-3

    # Cut short: what was written before the cut is replayed, and it says so.
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 6 // 10])
    partial = read_recording(cut)
    assert partial.problem is not None and "cut short or damaged" in partial.problem
    result = replay(partial, build_runner(build_tiny_policy(tiny_spec(), seed=3), EAGER, "cpu"))
    assert 0 < len(result.steps) < len(same.steps)
    assert result.largest == 0.0


@pytest.fixture
def flow_checkpoint(tmp_path) -> Path:
    from policies.checkpoints.tempo_format import save_checkpoint
    from policies.flow.demo import make_demo_flow_policy

    directory = tmp_path / "flow"
    flow = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=20, dim_model=16)
    save_checkpoint(directory, flow)
    return directory


def test_the_flow_policy_replays_within_1e_6_through_tempo_replay(
    tmp_path, flow_checkpoint, capsys
) -> None:
    settings = [f"policy.path={flow_checkpoint}", "policy.rtc.mode=exact",
                "execution.ensemble=newest", "execution.query_period=4",
                "runner.top_tier=eager_fp32"]  # fmt: skip
    path = _record(tmp_path, {"front": (32, 32)}, None, *settings)
    recording = read_recording(path)
    # Real-time chunking was in play: requests carried the robot's previous plan.
    plans = [m for m in recording.messages if m.name == "inference_request"]
    assert any(m.data["previous_plan"] is not None for m in plans)

    args = ["replay", str(path), "--policy.path", str(flow_checkpoint), "--summary"]
    for setting in settings[1:]:
        args += ["--set", setting]
    assert main(args) == 0
    captured = capsys.readouterr()
    out = captured.out
    # Progress goes to stderr (a long replay on a CPU is otherwise silent for minutes).
    assert "tempo replay: building the policy" in captured.err
    assert "tempo replay:" not in out
    compared = re.search(r"(\d+) chunks compared; largest difference ([0-9.eE+-]+)", out)
    assert compared is not None, out
    assert int(compared.group(1)) >= 10
    assert float(compared.group(2)) <= 1e-6

    # Against another checkpoint's weights the same recording differs.
    from policies.checkpoints.tempo_format import save_checkpoint
    from policies.flow.demo import make_demo_flow_policy

    other = tmp_path / "other"
    save_checkpoint(other, make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=20,
                                                 dim_model=16, seed=5))  # fmt: skip
    args[3] = str(other)
    assert main(args) == 0
    compared = re.search(r"largest difference ([0-9.eE+-]+)", capsys.readouterr().out)
    assert compared is not None and float(compared.group(1)) > 1e-3


def test_a_file_that_is_no_recording_is_one_sentence(tmp_path, capsys) -> None:
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not an mcap file at all")
    assert main(["replay", str(junk)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"tempo: {junk} is not a readable MCAP recording (InvalidMagic)"
