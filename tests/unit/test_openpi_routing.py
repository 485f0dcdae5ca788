"""openpi PyTorch directories at the checkpoint front door: detect_format tells them from Tempo
and LeRobot ones, and load_checkpoint / describe_checkpoint hand them to the first family that
declares read_openpi (a toy one registered here at run time), or refuse them naming the folder."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from controller.errors import CheckpointError
from policies.act.lerobot import read_lerobot_act
from policies.base import CameraSpec, PolicySpec
from policies.checkpoints.files import detect_format
from policies.checkpoints.load import describe_checkpoint, load_checkpoint
from policies.registry import CheckpointFamily, PolicyFamily, register, unregister
from policies.tensor_policy import TensorPolicy
from tests.pi0_checkpoint_dirs import write_lerobot, write_openpi

FAMILY = "toy_openpi"


class ToyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    joints: int
    chunk_size: int


class ToyModule(nn.Module):
    """Every action is the newest state's first value; enough to be a policy."""

    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        self.gain = nn.Parameter(torch.ones(config.joints))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        current = inputs[-1][:, -1, :]
        return (current * self.gain).unsqueeze(1).expand(-1, self.config.chunk_size, -1)


@dataclass
class Converted:
    policy: TensorPolicy
    layout: str
    notes: list[str] = field(default_factory=list)


reads: list[tuple[Path, tuple[str, ...] | None]] = []


def read_openpi(directory: Path, joint_names: Sequence[str] | None) -> Converted:
    """The toy family's openpi reader: the chunk from config.json, names from the caller."""
    reads.append((directory, None if joint_names is None else tuple(joint_names)))
    horizon = json.loads((directory / "config.json").read_text())["action_horizon"]
    names = tuple(joint_names) if joint_names is not None else ("a", "b")
    config = ToyConfig(joints=len(names), chunk_size=horizon)
    spec = PolicySpec(
        cameras=(CameraSpec(name="base_0_rgb", height=224, width=224),),
        state_size=len(names),
        joint_names=names,
        chunk_size=horizon,
    )
    module = ToyModule(config).train()  # the front door must hand it back in eval mode
    return Converted(TensorPolicy(spec=spec, module=module), "toy layout", ["read by the toy"])


def _checkpoint() -> CheckpointFamily:
    return CheckpointFamily(
        config_model=ToyConfig,
        module_type=ToyModule,
        spec_problems=lambda spec, config: [],
        describe=lambda spec, config: [f"toy: chunk {config.chunk_size}"],
        read_openpi=read_openpi,
    )


@pytest.fixture
def without_pi0(monkeypatch: pytest.MonkeyPatch) -> None:
    """The routing as if the built-in pi0 family (the one that reads openpi) were absent."""
    from policies.checkpoints import load
    from policies.registry import checkpoint_families, checkpoint_families_from

    def others() -> tuple:
        return tuple((f, c) for f, c in checkpoint_families() if f.name not in ("pi0", "pi05"))

    def others_from(first: object) -> Iterator[tuple]:
        yield from (
            (f, c) for f, c in checkpoint_families_from(first) if f.name not in ("pi0", "pi05")
        )

    monkeypatch.setattr(load, "checkpoint_families", others)
    monkeypatch.setattr(load, "checkpoint_families_from", others_from)


def test_the_built_in_pi0_family_reads_openpi_directories() -> None:
    from policies.registry import checkpoint_families

    readers = [f.name for f, c in checkpoint_families() if c.read_openpi is not None]
    assert readers == ["pi0"]


@pytest.fixture
def toy_family(without_pi0: None) -> Iterator[PolicyFamily]:
    family = register(
        PolicyFamily(name=FAMILY, title="Toy-openpi", summary="a test", checkpoint=_checkpoint)
    )
    reads.clear()
    try:
        yield family
    finally:
        unregister(FAMILY)


def test_detect_format_knows_openpi_by_its_exact_fields(tmp_path: Path) -> None:
    write_openpi(tmp_path / "openpi", "pi0")
    assert detect_format(tmp_path / "openpi")[0] == "openpi"
    with pytest.raises(CheckpointError, match="is an openpi PyTorch checkpoint, not a LeRobot one"):
        read_lerobot_act(tmp_path / "openpi")
    write_lerobot(tmp_path / "lerobot", "pi0")
    assert detect_format(tmp_path / "lerobot")[0] == "lerobot"
    config = tmp_path / "openpi" / "config.json"
    raw = json.loads(config.read_text())
    config.write_text(json.dumps({**raw, "pi05": False}))
    assert detect_format(tmp_path / "openpi")[0] == "openpi"
    for changed in ({**raw, "hidden_size": 8}, {k: v for k, v in raw.items() if k != "precision"}):
        config.write_text(json.dumps(changed))
        with pytest.raises(CheckpointError, match="nor an openpi PyTorch checkpoint"):
            detect_format(tmp_path / "openpi")


def test_an_openpi_directory_reaches_the_family_that_reads_it(
    toy_family: PolicyFamily, tmp_path: Path
) -> None:
    write_openpi(tmp_path / "ckpt", "pi05")
    names = ("j0", "j1", "j2")
    policy = load_checkpoint(tmp_path / "ckpt", joint_names=names)
    assert reads == [(tmp_path / "ckpt", names)]
    assert isinstance(policy.module, ToyModule) and not policy.module.training
    assert policy.spec.joint_names == names and policy.spec.chunk_size == 10
    text = describe_checkpoint(tmp_path / "ckpt")
    assert text.startswith("format: openpi Toy-openpi (toy layout)\n")
    assert "note: read by the toy" in text and "toy: chunk 10" in text


def test_an_openpi_directory_no_family_reads_is_refused_naming_it(
    without_pi0: None, tmp_path: Path
) -> None:
    write_openpi(tmp_path / "ckpt", "pi0")
    for call in (load_checkpoint, describe_checkpoint):
        with pytest.raises(CheckpointError) as caught:
            call(tmp_path / "ckpt")
        assert str(caught.value) == (
            f"{tmp_path / 'ckpt'} is an openpi PyTorch checkpoint (pi0 / pi0.5), and no policy "
            "family this Tempo serves reads openpi checkpoints"
        )
