"""Checkpoint files as a user meets them: written readable (0644 under umask 022, honouring the
umask), and `tempo checkpoint inspect` reading metadata only, never building the model."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from safetensors.torch import load_file

from policies.act.model import ACT
from policies.checkpoints.load import describe_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from policies.flow.model import FlowMatchingPolicy
from tests.unit.test_act_checkpoint import tiny_policy


@pytest.fixture
def umask():
    """Set the process's umask for one test, restored after."""
    previous = os.umask(0o022)
    yield os.umask
    os.umask(previous)


def _modes(directory: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}


@pytest.mark.parametrize(
    ("mask", "mode"),
    [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)],
    ids=["umask-022", "umask-027", "umask-002"],
)
def test_written_files_follow_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    directory = save_checkpoint(tmp_path / "ckpt", tiny_policy())
    assert _modes(directory) == {"config.json": mode, "model.safetensors": mode}
    assert [p.name for p in directory.iterdir() if p.name.startswith(".")] == []


def test_inspect_builds_no_model(tmp_path, monkeypatch):
    directory = save_checkpoint(tmp_path / "ckpt", tiny_policy())

    def refuse(*args, **kwargs):
        raise AssertionError("describing a checkpoint built a model")

    monkeypatch.setattr(ACT, "__init__", refuse)
    monkeypatch.setattr(FlowMatchingPolicy, "__init__", refuse)
    text = describe_checkpoint(directory)
    stored = load_file(str(directory / "model.safetensors"))
    values = sum(tensor.numel() for tensor in stored.values())
    assert f"{len(stored)} tensors, {values:,} values (parameters and buffers)" in text
