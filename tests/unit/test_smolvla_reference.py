"""Tempo's SmolVLA against LeRobot's own outputs, and its refusals of bad input.

tests/data/smolvla_lerobot_tiny/ is what LeRobot 0.6.1's SmolVLAPolicy.save_pretrained and its
processor pipelines wrote for a tiny SmolVLA with random weights (2 cameras of different sizes,
a SmolVLM backbone of width 64 cut to 4 layers, an expert of width 48 alternating self- and
cross-attention), plus the backbone's Hugging Face config (vlm_config.json), the tokenizer
LeRobot's preprocessor used (tokenizer.json) and `reference.safetensors`: the inputs, the token
ids LeRobot's tokenizer step made and the chunk its predict_action_chunk returned for the given
noise, written by scripts/parity/check_smolvla_parity.py. Here Tempo must reproduce them
without LeRobot.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from controller.errors import CheckpointError
from policies.checkpoints.load import load_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from policies.tensor_policy import TensorPolicy

pytest.importorskip("tokenizers", reason="SmolVLA's tokenizer needs the tokenizers package")

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "smolvla_lerobot_tiny"
TOLERANCE = 1e-4  # relative to the chunk's largest value; measured 0 on a CPU


@pytest.fixture(autouse=True)
def _empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_hub_cache"))


def _reference() -> tuple[dict[str, torch.Tensor], list[str]]:
    path = str(REFERENCE / "reference.safetensors")
    with safe_open(path, "pt") as handle:
        tasks = (handle.metadata() or {})["tasks"].split("\n")
    return load_file(path), tasks


def _chunk(policy: TensorPolicy, x: dict[str, torch.Tensor], tasks: list[str]) -> torch.Tensor:
    from policies.prompt_tokens import PromptTokenizer

    prompt = policy.spec.prompt
    assert prompt is not None
    tokenizer = PromptTokenizer(
        Path(prompt.tokenizer), prompt.max_length, prompt.vocab_size, prompt.template
    )
    tokens = [tokenizer.encode(task) for task in tasks]
    for row, token in enumerate(tokens):  # the ids LeRobot's tokenizer step made
        mask = x["lerobot_token_mask"][row].bool()
        assert token.ids[token.mask].tolist() == x["lerobot_token_ids"][row][mask].tolist()
    codec = policy.inputs
    embedded = torch.from_numpy(np.stack([codec.embedder.embed(t.ids) for t in tokens]))
    mask = torch.from_numpy(np.stack([t.mask for t in tokens]).astype(np.float32))
    frames = [x["frames_cam0"][:, None], x["frames_cam1"][:, None]]  # two sizes: two groups
    with torch.no_grad():
        return policy.module(*frames, x["state"], x["noise"], embedded, mask)


def _error(ours: torch.Tensor, expected: torch.Tensor) -> float:
    return float((ours - expected).abs().max() / expected.abs().max())


def test_tempo_reproduces_lerobots_saved_chunk() -> None:
    policy = load_checkpoint(REFERENCE)
    x, tasks = _reference()
    error = _error(_chunk(policy, x, tasks), x["lerobot_actions"])
    assert error <= TOLERANCE, f"relative error {error:.2e} against LeRobot's chunk"


def test_the_reference_fails_on_a_changed_weight() -> None:
    policy = load_checkpoint(REFERENCE)
    x, tasks = _reference()
    with torch.no_grad():
        policy.module.vlm_with_expert.expert.layers[1].self_attn.k_proj.weight.mul_(1.5)
    assert _error(_chunk(policy, x, tasks), x["lerobot_actions"]) > TOLERANCE


def test_spec_follows_lerobots_config() -> None:
    spec = load_checkpoint(REFERENCE).spec
    assert [(c.name, c.height, c.width) for c in spec.cameras] == [
        ("cam0", 24, 32),
        ("cam1", 40, 30),
    ]
    assert spec.state_size == 5 and spec.action_dim == 4 and spec.chunk_size == 6
    assert spec.execution is not None and spec.execution.query_period == 4
    assert spec.prompt is not None and spec.prompt.template == "smolvla"
    assert Path(spec.prompt.tokenizer) == (REFERENCE / "tokenizer.json").resolve()


def test_a_tempo_checkpoint_round_trip_keeps_the_chunk(tmp_path: Path) -> None:
    policy = load_checkpoint(REFERENCE)
    save_checkpoint(tmp_path / "tempo", policy)
    again = load_checkpoint(tmp_path / "tempo")
    x, tasks = _reference()
    assert again.spec.prompt is not None
    assert Path(again.spec.prompt.tokenizer).name == "tokenizer.json"
    assert torch.equal(_chunk(again, x, tasks), _chunk(policy, x, tasks))


def _copy(tmp_path: Path, **changes: object) -> Path:
    directory = tmp_path / "ckpt"
    shutil.copytree(REFERENCE, directory)
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_widths_and_tokenizer_come_from_the_hub_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = _copy(tmp_path)
    snapshot = tmp_path / "hub" / "models--tempo-tests--tiny-smolvlm" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (directory / "vlm_config.json").rename(snapshot / "config.json")
    (directory / "tokenizer.json").rename(snapshot / "tokenizer.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    policy = load_checkpoint(directory)
    assert policy.spec.prompt is not None
    assert Path(policy.spec.prompt.tokenizer) == (snapshot / "tokenizer.json").resolve()
    x, tasks = _reference()
    assert _error(_chunk(policy, x, tasks), x["lerobot_actions"]) <= TOLERANCE


def test_the_older_layout_keeps_statistics_in_the_weights(tmp_path: Path) -> None:
    directory = _copy(tmp_path)
    state = load_file(str(next(directory.glob("policy_preprocessor_step_*.safetensors"))))
    action = load_file(str(next(directory.glob("policy_postprocessor_step_*.safetensors"))))
    tensors = load_file(str(directory / "model.safetensors"))
    for stat in ("mean", "std"):
        tensors[f"normalize_inputs.buffer_observation_state.{stat}"] = state[
            f"observation.state.{stat}"
        ]
        tensors[f"unnormalize_outputs.buffer_action.{stat}"] = action[f"action.{stat}"]
        tensors[f"normalize_targets.buffer_action.{stat}"] = action[f"action.{stat}"].clone()
    save_file(tensors, str(directory / "model.safetensors"))
    for path in directory.glob("policy_*processor*"):
        path.unlink()
    policy = load_checkpoint(directory)
    x, tasks = _reference()
    assert _error(_chunk(policy, x, tasks), x["lerobot_actions"]) <= TOLERANCE


def test_another_familys_lerobot_checkpoint_is_refused(tmp_path: Path) -> None:
    from policies.smolvla.lerobot import read_lerobot_smolvla

    with pytest.raises(CheckpointError, match="LeRobot 'pi0' policy, not SmolVLA"):
        read_lerobot_smolvla(_copy(tmp_path, type="pi0"))


@pytest.mark.parametrize(
    ("change", "sentence"),
    [
        ({"adapt_to_pi_aloha": True}, "adapt_to_pi_aloha = True is not served"),
        ({"add_image_special_tokens": True}, "add_image_special_tokens = True is not served"),
        ({"num_expert_layers": 2}, "num_expert_layers = 2 is not served"),
        ({"use_dual_system": True}, "option\\(s\\) Tempo does not know: use_dual_system"),
        ({"vlm_model_name": "someone/other-vlm"}, "names the backbone 'someone/other-vlm'"),
    ],
)
def test_options_tempo_does_not_serve_are_refused(
    tmp_path: Path, change: dict[str, object], sentence: str
) -> None:
    directory = _copy(tmp_path, **change)
    if "vlm_model_name" in change:
        (directory / "vlm_config.json").unlink()
    with pytest.raises(CheckpointError, match=sentence):
        load_checkpoint(directory)


def test_a_missing_normalizer_file_is_one_sentence(tmp_path: Path) -> None:
    directory = _copy(tmp_path)
    next(directory.glob("policy_postprocessor_step_*.safetensors")).unlink()
    with pytest.raises(CheckpointError, match="unnormalizer_processor.safetensors"):
        load_checkpoint(directory)


def test_placeholder_statistics_are_refused(tmp_path: Path) -> None:
    directory = _copy(tmp_path)
    path = next(directory.glob("policy_preprocessor_step_*.safetensors"))
    stats = load_file(str(path))
    stats["observation.state.mean"] = torch.full_like(stats["observation.state.mean"], np.inf)
    save_file(stats, str(path))
    with pytest.raises(CheckpointError, match="not finite .* fine-tune the policy"):
        load_checkpoint(directory)


def test_a_checkpoint_without_a_tokenizer_reads_but_names_none(tmp_path: Path) -> None:
    directory = _copy(tmp_path)
    (directory / "tokenizer.json").unlink()
    policy = load_checkpoint(directory)
    assert policy.spec.prompt is None
