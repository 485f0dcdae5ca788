"""Every checkpoint family loaded the way `tempo serve` loads it (build_policy), on CUDA.

The other GPU tests build policies in memory; this one goes through the checkpoint on disk, the
catalog and the daemon's state bounds, where a tensor left on the CPU once stopped every
`tempo serve` of an ACT checkpoint on a GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.config import load_config
from controller.inference.build import build_policy
from policies.base import RobotContext
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_demo_flow_policy, make_demo_policy, make_demo_tdmpc2_checkpoint

pytestmark = pytest.mark.gpu


def _checkpoint(kind: str, directory: Path) -> Path:
    if kind == "act":
        return save_checkpoint(directory, make_demo_policy())
    if kind == "flow":
        return save_checkpoint(directory, make_demo_flow_policy(n_steps=2))
    return make_demo_tdmpc2_checkpoint(directory)


@pytest.mark.parametrize("kind", ["act", "flow", "tdmpc2"])
def test_a_saved_checkpoint_serves_on_cuda(kind: str, tmp_path: Path) -> None:
    path = _checkpoint(kind, tmp_path / kind)
    config = load_config(
        None,
        [
            "policy.kind=checkpoint",
            f"policy.path={path}",
            "policy.device=cuda",
            "runner.top_tier=eager_half",
        ],
    )
    policy = build_policy(config.policy, config.robot, config.runner)
    spec = policy.spec
    if kind != "tdmpc2":
        assert spec.state_bounds is not None  # computed from the CUDA module's statistics
    rng = np.random.default_rng(0)
    images = {
        c.name: rng.integers(0, 256, (c.height, c.width, 3), dtype=np.uint8) for c in spec.cameras
    }
    state = np.zeros((spec.state_history, spec.state_size), dtype=np.float32)
    context = RobotContext(step=0, episode_start=True, state_history=state)
    actions = policy.predict(images, context).actions
    assert actions.shape == (spec.chunk_size, spec.action_dim)
    assert np.isfinite(actions).all()
