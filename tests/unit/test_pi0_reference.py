"""Tempo's pi0 and pi0.5 against LeRobot's own outputs, saved by scripts/parity/check_pi0_parity.py.

tests/data/<family>_lerobot_tiny/ is the directory LeRobot's save_pretrained (and its processor
pipelines) wrote for its own PI0Policy / PI05Policy at reduced widths, with random weights, plus
`reference.safetensors`: the inputs both networks were given and the chunk LeRobot's
sample_actions returned on an H100 in FP32. Here Tempo reads that directory with its checkpoint
reader and must reproduce the chunk on the CPU, without LeRobot.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from policies.pi0.checkpoint_files import read_pi0_checkpoint
from policies.pi0.from_checkpoint import build_network, network_config
from policies.pi0.prompt import PromptEmbedder

DATA = Path(__file__).resolve().parents[1] / "data"
TOLERANCE = 1e-4  # relative to the chunk's largest value; measured ~1e-7 GPU vs GPU


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_tempo_reproduces_lerobots_saved_chunk(family: str) -> None:
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is the faster here
    directory = DATA / f"{family}_lerobot_tiny"
    files = read_pi0_checkpoint(directory)
    assert files.family == family and files.source == "lerobot"
    widths = json.loads((directory / "tempo_widths.json").read_text())
    network = build_network(files, network_config(files, widths))
    x = load_file(str(directory / "reference.safetensors"))
    prompt = torch.from_numpy(PromptEmbedder.from_network(network).embed(x["tokens"].numpy()))
    args = [x["images"], x["image_masks"], prompt, x["token_mask"]]
    if family == "pi0":
        args.append(x["state"])
    with torch.no_grad():
        ours = network.sample_actions(*args, noise=x["noise"])
    expected = x["lerobot_actions"]
    error = float((ours - expected).abs().max() / expected.abs().max())
    assert error <= TOLERANCE, f"{family}: relative error {error:.2e} against LeRobot's chunk"


def test_the_reference_fails_on_a_changed_weight() -> None:
    """The check can fail: one weight changed and the chunk no longer matches."""
    directory = DATA / "pi0_lerobot_tiny"
    files = read_pi0_checkpoint(directory)
    widths = json.loads((directory / "tempo_widths.json").read_text())
    network = build_network(files, network_config(files, widths))
    x = load_file(str(directory / "reference.safetensors"))
    with torch.no_grad():
        network.action_out_proj.bias.add_(0.05)
        prompt = PromptEmbedder.from_network(network).embed(x["tokens"].numpy())
        ours = network.sample_actions(
            x["images"], x["image_masks"], torch.from_numpy(prompt), x["token_mask"],
            x["state"], noise=x["noise"],
        )  # fmt: skip
    expected = x["lerobot_actions"]
    assert float((ours - expected).abs().max() / expected.abs().max()) > TOLERANCE
