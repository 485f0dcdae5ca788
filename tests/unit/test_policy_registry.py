"""A new policy family is one folder and one registry line: a toy family written into a temporary
package, registered at run time, is saved in Tempo's checkpoint format, loaded, built by the
catalog, run by a runner and served by a daemon to a client, with no Tempo file edited. The
folder holds everything of the family: its settings (`policy.toy`, validated by its model and
served by its hook), its CLI subcommand (`tempo checkpoint import-toy`) and how `tempo profile`
times it by phase."""

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
import argparse
from pathlib import Path

from controller.errors import ConfigError
from policies.registry import (
    CheckpointFamily, FamilySettings, ImportCommand, PolicyFamily, ProfilePhases
)


def _checkpoint() -> CheckpointFamily:
    from {PACKAGE}.checkpoint import CHECKPOINT

    return CHECKPOINT


def _settings_model():
    from {PACKAGE}.settings import ToySettings

    return ToySettings


def serve_toy_settings(policy, settings):
    \"\"\"policy.toy.shift added to every action of a toy checkpoint; refused for another's.\"\"\"
    shift = settings.section("toy").shift
    if shift == 0.0:
        return policy
    if type(policy.module).__name__ != "ToyModule":
        raise ConfigError("policy.toy applies to toy checkpoints")
    from {PACKAGE}.checkpoint import shifted

    return shifted(policy, shift)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("destination", type=Path)
    parser.add_argument("--gain", type=float, required=True)


def run(args: argparse.Namespace) -> int:
    from {PACKAGE}.checkpoint import write_checkpoint

    print(f"wrote {{write_checkpoint(args.destination, args.gain)}}")
    return 0


def _phases() -> ProfilePhases:
    from {PACKAGE}.phases import PHASES

    return PHASES


FAMILY = PolicyFamily(
    name="toy",
    title="toy",
    summary="a test family",
    checkpoint=_checkpoint,
    serve_settings=serve_toy_settings,
    settings=(FamilySettings(section="toy", model=_settings_model),),
    import_commands=(
        ImportCommand(name="import-toy", help="write a toy checkpoint", add_arguments=add_arguments,
                      run=run),
    ),
    profile_phases=_phases,
)
"""

# Its settings, `policy.toy:`: pydantic only, as every family's.
SETTINGS_PY = """
from pydantic import Field

from policies.section_model import FamilySection


class ToySettings(FamilySection):
    shift: float = Field(default=0.0, ge=-1.0, le=1.0, description="Added to every action.")
"""

# How `tempo profile` times it: the whole forward, and its gain-and-offset part.
PHASES_PY = """
from policies.registry import ProfilePhases


def applies(module) -> bool:
    return type(module).__name__ == "ToyModule"


def measure(module, inputs, time):
    newest = inputs[-1][:, -1, :]
    return {
        "toy forward": time(lambda: module(*inputs)),
        "gain and offset": time(lambda: newest * module.gain + module.offset),
    }


PHASES = ProfilePhases(applies=applies, measure=measure)
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


def shifted(policy, shift):
    with torch.no_grad():
        policy.module.offset.add_(shift)
    return policy


def write_checkpoint(destination, gain):
    from policies.base import CameraSpec, PolicySpec
    from policies.checkpoints.tempo_format import save_checkpoint
    from policies.tensor_policy import TensorPolicy

    module = ToyModule(ToyConfig(joints=6, chunk_size=5, step=0.01))
    with torch.no_grad():
        module.gain.fill_(gain)
    joints = tuple(f"joint_{i}" for i in range(6))
    spec = PolicySpec(
        cameras=(CameraSpec(name="front", height=96, width=128),),
        state_size=6,
        joint_names=joints,
        chunk_size=5,
    )
    return save_checkpoint(destination, TensorPolicy(spec=spec, module=module))
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
    (package / "settings.py").write_text(textwrap.dedent(SETTINGS_PY))
    (package / "phases.py").write_text(textwrap.dedent(PHASES_PY))
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
        "execution.ensemble=newest",
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


def test_its_settings_are_its_own_section_validated_by_its_model(toy_checkpoint: Path) -> None:
    """policy.toy is the family's: validated by its model, and served by its hook."""
    checkpoint = ["policy.kind=checkpoint", f"policy.path={toy_checkpoint}"]
    with pytest.raises(ConfigError, match=r"policy\.toy\.shift: Input should be less than"):
        load_config(None, [*checkpoint, "policy.toy.shift=5"])
    config = load_config(None, [*checkpoint, "policy.toy.shift=0.25"])
    assert config.policy.section("toy").shift == 0.25
    policy = build_tensor_policy(config.policy, config.robot)
    runner_config = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=1)
    runner = build_runner(policy, runner_config, "cpu")
    state = np.linspace(-1.0, 1.0, len(JOINTS), dtype=np.float32)
    images = {"front": np.zeros((96, 128, 3), dtype=np.uint8)}
    chunk = runner.predict_chunk(images, state[None, :])
    np.testing.assert_allclose(chunk, expected_chunk(state) + 0.25, rtol=1e-6, atol=1e-6)


def test_a_section_of_no_registered_family_is_an_unknown_field(toy_checkpoint: Path) -> None:
    family = get_family("toy")
    unregister("toy")
    try:
        with pytest.raises(ConfigError, match=r"policy\.toy: unknown field"):
            load_config(None, ["policy.toy.shift=0.25"])
    finally:
        register(family)


def test_its_cli_subcommand_writes_a_checkpoint_it_serves(
    toy_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.cli import main

    destination = tmp_path / "written"
    assert main(["checkpoint", "import-toy", str(destination), "--gain", "0.75"]) == 0
    assert f"wrote {destination}" in capsys.readouterr().out
    loaded = load_checkpoint(destination)
    assert type(loaded.module).__name__ == "ToyModule"
    assert float(loaded.module.gain.detach()[0]) == 0.75


def test_tempo_profile_times_it_by_its_own_phases(toy_checkpoint: Path) -> None:
    from controller.tools.profiling import render_profile, run_profile

    config = load_config(
        None,
        [
            "policy.kind=checkpoint",
            f"policy.path={toy_checkpoint}",
            "runner.top_tier=eager_fp32",
            "runner.step_budget_ms=null",
            "runner.parity_observations=1",
        ],
    )
    result = run_profile(config, 4, warmup=1)
    phases = {row.key: row for row in result.rows if row.group == "phases"}
    assert list(phases) == ["phase:total", "phase:gain_and_offset"]
    assert phases["phase:total"].label == "toy forward"
    assert all(row.samples.size >= 4 and (row.samples > 0).all() for row in phases.values())
    assert result.row("outside") is None  # timed by its phases, not per submodule
    assert "gain and offset" in render_profile(result)
