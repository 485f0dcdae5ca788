"""Diffusion Policy served end to end on the CPU: `tempo serve` with a tiny Diffusion Policy
checkpoint (one camera, two observation steps), the policy in its own inference process, a
driver streaming observations faster than the control rate, a chunk asked every 4 steps.

With `policy.diffusion.noise=fixed` every chunk is a function of the observations, so each
action the driver gets must equal a row of the chunk the in-process model computes from the
observation it came from, the state before it and, as LeRobot's observation queue holds, the
frames of the observation sent just before it, which was never asked about itself. The chunk
the old history (the previously asked observation's frames) gives must not match.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from controller.wire.client import TempoClient
from policies.base import PolicySpec, RobotContext
from policies.checkpoints.load import load_checkpoint
from policies.diffusion.codec import with_fixed_noise
from policies.diffusion.demo import write_demo_checkpoint
from policies.tensor_policy import EagerPolicy
from tests.conftest import daemon_process

JOINTS = [f"joint_{i}" for i in range(3)]
HEIGHT, WIDTH = 32, 40
QUERY_PERIOD = 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("diffusion") / "tiny"
    return write_demo_checkpoint(
        directory,
        cameras=(("front", HEIGHT, WIDTH),),
        joint_names=JOINTS,
        state_size=4,
        scheduler="DDIM",
        steps=10,
    )


def observation(seq: int) -> tuple[np.ndarray, np.ndarray]:
    """The frame and state of the driver's observation number `seq` (all different)."""
    rng = np.random.default_rng(seq)
    frame = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    return frame, rng.uniform(-0.5, 0.5, 4).astype(np.float32)


def chunk_for(policy: EagerPolicy, index: int, past: int) -> np.ndarray:
    """The in-process chunk for observation `index`, with the state of the one sent before it
    and the frames of observation `past` as its past step."""
    frame, state = observation(index)
    context = RobotContext(
        step=0,
        episode_start=False,
        state_history=np.stack([observation(index - 1)[1], state]),
        past_frames={"front": observation(past)[0][None]},
    )
    return policy.predict({"front": frame}, context).actions


def matches_rows(actions: list[tuple[int, np.ndarray]], chunk: np.ndarray) -> bool:
    """Whether the actions (step, action), in step order, are consecutive rows of `chunk`."""
    first = actions[0][0]
    for start in range(chunk.shape[0]):
        rows = [start + step - first for step, _ in actions]
        if rows[-1] >= chunk.shape[0]:
            return False
        if all(
            np.allclose(chunk[r], a, atol=1e-4, rtol=1e-4)
            for r, (_, a) in zip(rows, actions, strict=True)
        ):
            return True
    return False


def test_actions_equal_the_in_process_model_with_every_steps_frames(
    tmp_path: Path, checkpoint: Path
) -> None:
    loaded = load_checkpoint(checkpoint)
    spec: PolicySpec = loaded.spec
    assert spec.frame_history == 2 and spec.state_history == 2
    reference = EagerPolicy(with_fixed_noise(loaded))
    overrides = (
        f"policy.path={checkpoint}",
        "policy.diffusion.noise=fixed",
        "control.rate_hz=20",
        f"execution.query_period={QUERY_PERIOD}",
        "execution.ensemble=newest",
        "runner.step_budget_ms=2000",
    )
    with daemon_process(tmp_path, *overrides):
        robot = TempoClient(
            f"ipc://{tmp_path}/tempo.sock", "arm", JOINTS, {"front": (HEIGHT, WIDTH)}, 4,
            handshake_timeout_s=20.0, stale_after_s=1.0,
        )  # fmt: skip
        made_from: dict[int, int] = {}  # the driver's obs seq -> the observation's index
        by_obs: dict[int, dict[int, np.ndarray]] = {}  # obs seq -> step -> action
        try:
            robot.connect()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                frame, state = observation(len(made_from))
                seq = robot.send_observation({"front": frame}, state)
                if seq is not None:
                    made_from[seq] = len(made_from)
                command = robot.receive(timeout_s=0.01)
                if command.kind == "action":
                    by_obs.setdefault(command.obs_seq, {})[command.step] = command.action
                asked = sorted(s for s in by_obs if made_from.get(s, 0) > 0)
                if len(asked) >= 3 and all(len(by_obs[s]) >= 2 for s in asked[:3]):
                    break
        finally:
            robot.close()
    asked = sorted(s for s in by_obs if made_from.get(s, 0) > 0)
    assert len(asked) >= 3, (sorted(by_obs), len(made_from))
    seq_of = {index: seq for seq, index in made_from.items()}
    for seq in asked[:3]:
        index = made_from[seq]
        # Several observations arrive per control step and one in 4 steps is asked about: the
        # one just before was not, and its frames must still be this one's past step.
        assert seq_of[index - 1] not in by_obs
        actions = sorted(by_obs[seq].items())
        assert matches_rows(actions, chunk_for(reference, index, index - 1)), (seq, actions)
        # The frames of the previously asked observation (what a history of requests alone
        # would hold) give another chunk.
        previous = max((made_from[s] for s in by_obs if s < seq), default=0)
        assert not matches_rows(actions, chunk_for(reference, index, previous))
