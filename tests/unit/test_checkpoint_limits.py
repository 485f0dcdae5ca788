"""Hostile checkpoint files: JSON and safetensors headers read with limits, and a config.json
claiming a huge model refused before anything of its size is built."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller.bounded_file import MAX_DEPTH
from controller.errors import CheckpointError
from policies.checkpoints.files import read_json, read_safetensors_header
from policies.checkpoints.load import load_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from tests.unit.test_act_checkpoint import tiny_policy

# The largest model ACTConfig allows: hundreds of GB of FP32 weights.
HUGE = {
    "dim_model": 8192,
    "n_heads": 128,
    "dim_feedforward": 65536,
    "n_encoder_layers": 64,
    "n_decoder_layers": 64,
    "n_vae_encoder_layers": 64,
    "latent_dim": 4096,
    "vision_backbone": "resnet152",
}

# Run in a child whose address space is capped 2 GiB above what its imports took.
_CAPPED = """
import json, resource, sys, time
import torch._dynamo  # as the inference process does: its import is not the load's cost
from controller.errors import CheckpointError
from policies.checkpoints.load import load_checkpoint
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
cap = size + 2 * 1024**3
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
start = time.monotonic()
try:
    load_checkpoint(sys.argv[1])
except CheckpointError as exc:
    print(json.dumps({"refused": str(exc), "seconds": time.monotonic() - start}))
"""


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return save_checkpoint(tmp_path / "tiny", tiny_policy())


def test_a_config_claiming_a_huge_model_is_refused_before_it_is_built(checkpoint: Path) -> None:
    config = checkpoint / "config.json"
    document = json.loads(config.read_text())
    document["model"].update(HUGE)
    config.write_text(json.dumps(document))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", _CAPPED, str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0 and result.stdout, result.stderr[-2000:]
    refusal = json.loads(result.stdout)["refused"]
    assert "does not fit the model its config describes" in refusal
    # The sentence names a mismatched tensor and the shape the config implies for it.
    assert re.search(r"wrong shape: [\w.]+ \([\d, ]+\) \(expected \([\d, ]+\)\)", refusal), refusal


def test_json_nested_too_deep_is_one_sentence(checkpoint: Path) -> None:
    (checkpoint / "config.json").write_text("[" * 200_000)
    with pytest.raises(CheckpointError, match=f"nests more than {MAX_DEPTH} levels"):
        load_checkpoint(checkpoint)


def test_json_that_is_not_utf8_is_one_sentence(checkpoint: Path) -> None:
    (checkpoint / "config.json").write_bytes(bytes(range(128, 256)) * 512)
    with pytest.raises(CheckpointError, match="is not UTF-8 text"):
        load_checkpoint(checkpoint)


def test_json_that_is_too_large_or_not_a_file_is_one_sentence(tmp_path: Path) -> None:
    large = tmp_path / "large.json"
    large.write_text(" " * (5 * 1024 * 1024) + "{}")
    with pytest.raises(CheckpointError, match="larger than 4 MiB"):
        read_json(large)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it for reading must not wait for a writer
    with pytest.raises(CheckpointError, match="it is a pipe, not a regular file"):
        read_json(fifo)
    with pytest.raises(CheckpointError, match="it is a character device"):
        read_json(Path("/dev/zero"))


def test_a_hostile_safetensors_header_is_refused_unread(checkpoint: Path, tmp_path: Path) -> None:
    names = read_safetensors_header(checkpoint / "model.safetensors")
    assert names["action_head.bias"] == ("F32", (3,))  # names, dtypes, shapes: nothing loaded
    claims_huge = tmp_path / "huge.safetensors"
    claims_huge.write_bytes((2**40).to_bytes(8, "little") + b"{}")
    with pytest.raises(CheckpointError, match="header length is 1099511627776"):
        read_safetensors_header(claims_huge)
    deep = b"[" * 100_000
    nested = tmp_path / "deep.safetensors"
    nested.write_bytes(len(deep).to_bytes(8, "little") + deep)
    with pytest.raises(CheckpointError, match="nests more than"):
        read_safetensors_header(nested)
    weights = checkpoint / "model.safetensors"
    shutil.copy(nested, weights)
    with pytest.raises(CheckpointError, match="nests more than"):
        load_checkpoint(checkpoint)
