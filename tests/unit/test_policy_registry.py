"""A new policy family is one folder and one registry line: a toy family written into a temporary
package, registered at run time, is saved in Tempo's checkpoint format, loaded, built by the
catalog, run by a runner and served by a daemon to a client, with no Tempo file edited."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from controller.config import load_config
from controller.errors import CheckpointError, ConfigError
from controller.inference.build import build_runner
from controller.runner_config import RunnerConfig
from controller.wire.client import TempoClient
from policies.base import CameraSpec, PolicySpec
from policies.catalog import build_tensor_policy
from policies.checkpoints.load import describe_checkpoint, load_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from policies.registry import families, get_family, register, unregister
from policies.tensor_policy import TensorPolicy
from tests.conftest import ipc_config, running_daemon, wait_for

PACKAGE = "tempo_test_toy_family"
JOINTS = tuple(f"joint_{i}" for i in range(6))
CHUNK = 5
GAIN, OFFSET, STEP = 0.5, 0.1, 0.01

# The family's declaration: standard library and policies.registry only, like every family.py.
FAMILY_PY = f"""
from policies.registry import CheckpointFamily, PolicyFamily


def _checkpoint() -> CheckpointFamily:
    from {PACKAGE}.checkpoint import CHECKPOINT

    return CHECKPOINT


FAMILY = PolicyFamily(name="toy", title="toy", summary="a test family", checkpoint=_checkpoint)
"""

# Its model: each action is gain * the newest state + offset, plus STEP per chunk row.
CHECKPOINT_PY = """
import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from policies.registry import CheckpointFamily


class ToyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    joints: int
    chunk_size: int
    step: float


class ToyModule(nn.Module):
    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        self.gain = nn.Parameter(torch.ones(config.joints))
        self.offset = nn.Parameter(torch.zeros(config.joints))
        rows = torch.arange(config.chunk_size, dtype=torch.float32) * config.step
        self.register_buffer("rows", rows)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        current = inputs[-1][:, -1, :]  # newest state; the frames are ignored
        actions = current * self.gain + self.offset
        return actions.unsqueeze(1) + self.rows.view(1, -1, 1)


def spec_problems(spec, config):
    pairs = [
        ("joints", spec.action_dim, config.joints),
        ("chunk", spec.chunk_size, config.chunk_size),
    ]
    return [f"{name} {a} in spec, {b} in model" for name, a, b in pairs if a != b]


def describe(spec, config):
    return [f"toy: {config.joints} joints, chunk {config.chunk_size}"]


CHECKPOINT = CheckpointFamily(
    config_model=ToyConfig, module_type=ToyModule, spec_problems=spec_problems, describe=describe
)
"""


@pytest.fixture(scope="module")
def toy_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The toy family's folder on sys.path (not registered yet)."""
    root = tmp_path_factory.mktemp("plugins")
    package = root / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "family.py").write_text(textwrap.dedent(FAMILY_PY))
    (package / "checkpoint.py").write_text(textwrap.dedent(CHECKPOINT_PY))
    sys.path.insert(0, str(root))
    try:
        yield package
    finally:
        unregister("toy")
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m.partition(".")[0] == PACKAGE]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def toy_checkpoint(toy_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy family registered (its one line) and one of its policies saved as a Tempo
    checkpoint, with weights that differ from the module's initial ones."""
    register(importlib.import_module(f"{PACKAGE}.family").FAMILY)  # the one registry line
    config_model = importlib.import_module(f"{PACKAGE}.checkpoint")
    module = config_model.ToyModule(config_model.ToyConfig(joints=6, chunk_size=CHUNK, step=STEP))
    with torch.no_grad():
        module.gain.fill_(GAIN)
        module.offset.fill_(OFFSET)
    spec = PolicySpec(
        cameras=(CameraSpec(name="front", height=96, width=128),),
        state_size=len(JOINTS),
        joint_names=JOINTS,
        chunk_size=CHUNK,
    )
    return save_checkpoint(
        tmp_path_factory.mktemp("toy") / "ckpt", TensorPolicy(spec=spec, module=module)
    )


def expected_chunk(state: np.ndarray) -> np.ndarray:
    rows = np.arange(CHUNK, dtype=np.float32)[:, None] * STEP
    return (state * GAIN + OFFSET)[None, :] + rows


def test_an_unknown_family_is_one_sentence_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        get_family("nope")
    assert str(caught.value).startswith(
        "unknown policy family 'nope'; known: act, flow, tdmpc2, reach, tiny"
    )


def test_a_checkpoint_of_an_unregistered_family_names_the_served_ones(
    toy_package: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "other"
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps({"format": "tempo", "format_version": 1, "policy_type": "toy2"})
    )
    with pytest.raises(CheckpointError, match=r"policy_type 'toy2' is not one this Tempo serves"):
        load_checkpoint(directory)


def test_the_registered_family_is_saved_loaded_and_described(toy_checkpoint: Path) -> None:
    assert get_family("toy") in families()
    assert json.loads((toy_checkpoint / "config.json").read_text())["policy_type"] == "toy"
    loaded = load_checkpoint(toy_checkpoint)
    assert type(loaded.module).__name__ == "ToyModule" and not loaded.module.training
    assert float(loaded.module.gain.detach()[0]) == GAIN  # the saved weights, not the initial ones
    text = describe_checkpoint(toy_checkpoint)
    assert "policy type toy" in text and "toy: 6 joints, chunk 5" in text


def test_the_catalog_builds_it_and_a_runner_serves_it(toy_checkpoint: Path) -> None:
    config = load_config(None, ["policy.kind=checkpoint", f"policy.path={toy_checkpoint}"])
    policy = build_tensor_policy(config.policy, config.robot)
    assert policy.spec.joint_names == JOINTS and policy.spec.chunk_size == CHUNK
    runner_config = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=1)
    runner = build_runner(policy, runner_config, "cpu")
    state = np.linspace(-1.0, 1.0, len(JOINTS), dtype=np.float32)
    images = {"front": np.zeros((96, 128, 3), dtype=np.uint8)}
    chunk = runner.predict_chunk(images, state[None, :])
    np.testing.assert_allclose(chunk, expected_chunk(state), rtol=1e-6, atol=1e-6)


def test_a_daemon_serves_it_to_a_client(toy_checkpoint: Path, tmp_path: Path) -> None:
    config = ipc_config(
        tmp_path,
        "policy.kind=checkpoint",
        f"policy.path={toy_checkpoint}",
        "runner.top_tier=eager_fp32",
        "inference.ensemble=newest",
    )
    state = np.full(len(JOINTS), 0.2, dtype=np.float32)
    frame = {"front": np.zeros((96, 128, 3), dtype=np.uint8)}
    with (
        running_daemon(config),
        TempoClient(
            config.server.bind, "arm0", list(JOINTS), {"front": (96, 128)}, len(JOINTS)
        ) as client,
    ):
        assert client.welcome.spec["chunk_size"] == CHUNK

        def an_action() -> list[np.ndarray]:
            client.send_observation(frame, state)
            command = client.receive(timeout_s=0.01)
            return [command.action] if command.kind == "action" else []

        action = wait_for(an_action, timeout=30.0)[0]
    # The first action of some chunk: gain * state + offset, plus STEP per row played.
    rows = (np.asarray(action) - (state * GAIN + OFFSET)) / STEP
    np.testing.assert_allclose(rows, np.round(rows[0]), atol=1e-3)
    assert 0 <= round(float(rows[0])) < CHUNK
