"""pi0 and pi0.5 in Tempo's own checkpoint format: saved from LeRobot's tiny directories and
read back as the same family, with the tokenizer carried inside the checkpoint, and the same
chunk on the same observation (CPU, FP32)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from controller.errors import CheckpointError
from controller.inference.examples import random_example
from policies.checkpoints.load import load_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from policies.checkpoints.tokenizer_file import TOKENIZER_FILE
from policies.pi0.pi05_config import Pi05Config
from policies.tensor_policy import EagerPolicy

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is the faster here


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_a_saved_pi0_reads_back_as_its_family_and_serves_the_same(
    tmp_path: Path, family: str
) -> None:
    source = tmp_path / "lerobot"
    shutil.copytree(DATA / f"{family}_lerobot_tiny", source)
    original = load_checkpoint(source)
    out = save_checkpoint(tmp_path / "tempo", original)
    config = json.loads((out / "config.json").read_text())
    assert config["policy_type"] == family
    assert config["spec"]["prompt"]["tokenizer"] == TOKENIZER_FILE
    images, context = random_example(original.spec, original.inputs, 5)
    expected = EagerPolicy(original, "cpu").predict(images, context).actions
    shutil.rmtree(source)  # the copy stands alone: the original's tokenizer is gone
    back = load_checkpoint(out)
    assert isinstance(back.module.config.network, Pi05Config) == (family == "pi05")
    assert back.spec.prompt is not None
    assert Path(back.spec.prompt.tokenizer) == (out / TOKENIZER_FILE).resolve()
    got = EagerPolicy(back, "cpu").predict(images, context).actions
    np.testing.assert_array_equal(got, expected)


def test_a_tempo_pi0_missing_its_tokenizer_is_one_sentence(tmp_path: Path) -> None:
    out = save_checkpoint(tmp_path / "tempo", load_checkpoint(DATA / "pi0_lerobot_tiny"))
    (out / TOKENIZER_FILE).unlink()
    with pytest.raises(CheckpointError, match="names its tokenizer .* which is missing"):
        load_checkpoint(out)
