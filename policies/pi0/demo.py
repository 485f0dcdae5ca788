"""`tempo demo --policy pi0` / `pi05`: a pi0 of reduced width for the simulated arm, random
weights, written as LeRobot writes a pi0 directory (config.json, model.safetensors, its
processor files with the arm's statistics, a tokenizer), plus `tempo_widths.json` for the
reduced widths, so the demo serves it through the same reader as a real checkpoint.

It runs on a CPU: 2 layers per tower at widths 32-64, 56x56 images (16 tokens a camera), a
24-token prompt (pi0.5: 64, with the state), a 3-step Euler integration. Its actions are the
arm's home pose plus a bounded random motion (the action statistics), not a trained behaviour.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from policies.demo_arm import ACTION_STD, DEFAULT_JOINTS, HOME_POSE
from policies.pi0.config import GemmaWidths, SiglipWidths

CAMERA = ("front", 96, 128)
IMAGE = 56
WIDTHS: dict[str, Any] = {
    "vision": SiglipWidths(width=32, depth=2, mlp_dim=64, num_heads=2, patch_size=14,
                           image_size=IMAGE).model_dump(),
    "language": GemmaWidths(width=64, depth=2, mlp_dim=128, num_heads=2, num_kv_heads=1,
                            head_dim=16).model_dump(),
    "expert": GemmaWidths(width=32, depth=2, mlp_dim=64, num_heads=2, num_kv_heads=1,
                          head_dim=16).model_dump(),
}  # fmt: skip
VOCAB = 256  # asked of SentencePiece; the demo's words give fewer
# Token ids per prompt: each of TASKS fits whole (pi0.5's with the state's 6 values, ~60).
PROMPT = {"pi0": 24, "pi05": 64}
# rad per unit of normalized action: random weights leave much of each chunk's starting noise
# in it, so the demo's chunks stay within a few hundredths of a radian of the home pose.
DEMO_ACTION_STD = 0.02
PROMPT_WORDS = "Task: a, State: -1 0;\nAction:"  # pi0.5's frame: its punctuation has pieces
TASKS = ("pick up the cube", "put the cube in the bin", "move the arm home", "wave")


def lerobot_config(family: str) -> dict[str, Any]:
    """config.json with PI0Config's / PI05Config's fields the demo sets."""
    joints = len(DEFAULT_JOINTS)
    return {
        "type": family,
        "n_obs_steps": 1,
        "input_features": {
            f"observation.images.{CAMERA[0]}": {"type": "VISUAL", "shape": [3, *CAMERA[1:]]},
            "observation.state": {"type": "STATE", "shape": [joints]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [joints]}},
        "device": "cpu",
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "dtype": "float32",
        "chunk_size": 20,
        "n_action_steps": 10,
        "max_state_dim": 8,
        "max_action_dim": 8,
        "num_inference_steps": 3,
        "min_period": 0.004,
        "max_period": 4.0,
        "image_resolution": [IMAGE, IMAGE],
        "empty_cameras": 0,
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "tokenizer_max_length": PROMPT[family],
        "use_relative_actions": False,
    } | (
        {"use_visual_memory": False, "use_proprioceptive_memory": False} if family == "pi05" else {}
    )


def arm_statistics() -> dict[str, torch.Tensor]:
    joints = len(DEFAULT_JOINTS)
    home = torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(joints)])
    stats: dict[str, torch.Tensor] = {}
    for key, std in (("observation.state", ACTION_STD), ("action", DEMO_ACTION_STD)):
        spread = torch.full((joints,), std)
        stats |= {
            f"{key}.mean": home.clone(), f"{key}.std": spread,
            f"{key}.min": home - 4 * spread, f"{key}.max": home + 4 * spread,
            f"{key}.q01": home - 3 * spread, f"{key}.q99": home + 3 * spread,
        }  # fmt: skip
    return stats


def train_tokenizer(directory: Path) -> int:
    """A SentencePiece model of the demo's words under directory/tokenizer.model; returns its
    vocabulary size (the model's token table has as many rows)."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([*TASKS, PROMPT_WORDS, *map(str, range(256))] * 8),
        model_writer=model, vocab_size=VOCAB, hard_vocab_limit=False, minloglevel=2,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, split_digits=False,
    )  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.model").write_bytes(model.getvalue())
    return int(sentencepiece.SentencePieceProcessor(model_proto=model.getvalue()).vocab_size())


def processor_files(directory: Path, config: dict[str, Any], family: str) -> None:
    features = {**config["input_features"], **config["output_features"]}
    norm = {"eps": 1e-08, "features": features, "norm_map": config["normalization_mapping"]}
    tokenizer = {
        "max_length": PROMPT[family], "task_key": "task", "padding_side": "right",
        "padding": "max_length", "truncation": True, "tokenizer_name": "tokenizer",
    }  # fmt: skip
    step = 6 if family == "pi0" else 3
    normalizer = f"policy_preprocessor_step_{step}_normalizer_processor.safetensors"
    norm_step = {"registry_name": "normalizer_processor", "config": norm, "state_file": normalizer}
    token_step = {"registry_name": "tokenizer_processor", "config": tokenizer,
                  "artifacts": {"tokenizer_name": "tokenizer"}}  # fmt: skip
    unchanged = {"enabled": False, "exclude_joints": [], "action_names": None}
    relative = {"registry_name": "relative_actions_processor", "config": unchanged}
    first = [{"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
             {"registry_name": "to_batch_processor", "config": {}}]  # fmt: skip
    device = {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}}
    if family == "pi0":
        steps = [*first, {"registry_name": "pi0_new_line_processor", "config": {}}, token_step,
                 device, relative, norm_step]  # fmt: skip
    else:
        steps = [*first, relative, norm_step,
                 {"registry_name": "pi05_prepare_state_tokenizer_processor_step", "config": {}},
                 token_step, device]  # fmt: skip
    pre = {"name": "policy_preprocessor", "steps": steps}
    unnormalizer = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    post = {"name": "policy_postprocessor", "steps": [
        {"registry_name": "unnormalizer_processor", "config": norm, "state_file": unnormalizer},
        {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
    ]}  # fmt: skip
    (directory / "policy_preprocessor.json").write_text(json.dumps(pre, indent=4))
    (directory / "policy_postprocessor.json").write_text(json.dumps(post, indent=4))
    stats = arm_statistics()
    save_file(stats, str(directory / normalizer))
    save_file(stats, str(directory / unnormalizer))


def demo_network_weights(family: str, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded random weights of the demo's network, LeRobot's keys (with `model.`); the velocity
    head scaled down so that actions stay near the arm's home pose."""
    from policies.pi0.config import Pi0Config
    from policies.pi0.pi05_config import Pi05Config

    config = lerobot_config(family)
    fields = {k: config[k] for k in ("chunk_size", "n_action_steps", "max_state_dim",
              "max_action_dim", "num_inference_steps", "tokenizer_max_length")}  # fmt: skip
    common = dict(**fields, **WIDTHS, image_resolution=(IMAGE, IMAGE), vocab_size=vocab)
    torch.manual_seed(seed)
    if family == "pi0":
        from policies.pi0.network import Pi0Network

        network: torch.nn.Module = Pi0Network(Pi0Config(**common))
    else:
        from policies.pi0.pi05_network import Pi05Network

        network = Pi05Network(Pi05Config(**common))
    # The vocabulary tables (HostTable) are made uninitialised, for a checkpoint to fill: give
    # them seeded values too, or the demo's prompts embed whatever memory held (NaN at times).
    from policies.pi0.gemma import HostTable

    with torch.no_grad():
        for module in network.modules():
            if isinstance(module, HostTable):
                module.weight.normal_(0.0, module.weight.shape[1] ** -0.5)
    head = network.get_submodule("action_out_proj")
    if not isinstance(head, torch.nn.Linear):
        raise TypeError("the network's action_out_proj is a Linear layer")
    with torch.no_grad():
        head.weight.mul_(0.1)
        head.bias.zero_()
    return {f"model.{k}": v.detach().contiguous().clone() for k, v in network.state_dict().items()}


def write_demo_checkpoint(directory: Path, family: str) -> Path:
    """The demo's directory (written once; an existing one is served as it is, unless an
    earlier Tempo wrote it with another config or uninitialised token tables)."""
    if _written_by_this_demo(directory, family):
        return directory
    partial = directory.with_name(directory.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    config = lerobot_config(family)
    (partial / "config.json").write_text(json.dumps(config, indent=4))
    (partial / "tempo_widths.json").write_text(json.dumps(WIDTHS, indent=2))
    processor_files(partial, config, family)
    vocab = train_tokenizer(partial / "tokenizer")
    save_file(demo_network_weights(family, vocab), str(partial / "model.safetensors"))
    if directory.exists():  # an earlier run's, left incomplete
        shutil.rmtree(directory)
    partial.replace(directory)
    return directory


def _written_by_this_demo(directory: Path, family: str) -> bool:
    """Whether `directory` holds this demo's checkpoint: its config, and vocabulary tables that
    hold numbers (the first demos wrote them uninitialised)."""
    from safetensors import safe_open

    from policies.pi0.weights import HOST_TABLE_KEYS

    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return False
    if (
        config != json.loads(json.dumps(lerobot_config(family)))
        or not (directory / "model.safetensors").is_file()
    ):
        return False
    try:
        with safe_open(str(directory / "model.safetensors"), "pt") as weights:
            names = set(weights.keys())
            tables = [weights.get_tensor(f"model.{key}") for key in HOST_TABLE_KEYS
                      if f"model.{key}" in names]  # fmt: skip
    except Exception:  # SafetensorError and the like: an unreadable file is written again
        return False
    return all(bool(t.isfinite().all()) and float(t.abs().max()) < 1e3 for t in tables)


def demo_settings(cache: Path, family: str) -> list[str]:
    """`tempo demo --policy pi0|pi05`: the family's demo directory under `cache` (written on the
    first run) and the task its simulated robot, which names none, is given."""
    directory = write_demo_checkpoint(cache / f"demo-{family}", family)
    return [f"policy.path={directory}", f"policy.prompt.default_task={TASKS[0]}"]
