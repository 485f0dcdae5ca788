"""What a pi0 / pi0.5 checkpoint holds once read (`Pi0CheckpointFiles`), whichever program wrote
it, and the checks and key renames both readers (`policies.pi0.lerobot_files`,
`policies.pi0.openpi_files`) share. `policies.pi0.checkpoint_files` tells the layouts apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch

from controller.errors import CheckpointError
from policies.pi0.norm_stats import NormStats

Family = Literal["pi0", "pi05"]
Source = Literal["lerobot", "openpi"]

PALIGEMMA_TOKENIZER = "google/paligemma-3b-pt-224"
# Tower widths for a checkpoint of reduced width (LeRobot's files name only the variants):
# written by scripts/parity/check_pi0_parity.py and the demo beside the checkpoint's own files.
WIDTHS_FILE = "tempo_widths.json"
LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
# Tied to LM_HEAD in PaliGemma: safetensors keeps one of the two names.
EMBED_TOKENS = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
_EXPERT = "paligemma_with_expert.gemma_expert.model."

Shape = tuple[int, ...]
_Value = TypeVar("_Value")


@dataclass(frozen=True)
class Pi0CheckpointFiles:
    """A pi0 / pi0.5 checkpoint directory read into one form, whichever program wrote it.

    config_fields uses LeRobot's PI0Config names: chunk_size, n_action_steps, max_state_dim,
    max_action_dim, num_inference_steps, tokenizer_max_length, empty_cameras, image_resolution
    ((h, w)), paligemma_variant, action_expert_variant, dtype, min_period, max_period.
    camera_names / image_sizes: the real cameras in model order (LeRobot's empty cameras are
    counted by config_fields["empty_cameras"], not listed). tokenizer: the folder shipped with
    the checkpoint that holds tokenizer.model and / or tokenizer.json (as a HF tokenizer's
    save_pretrained writes them), else None (then tokenizer_name names the Hub tokenizer).
    tensors: the weights, empty when read with tensors=False; shapes: every weight's shape
    (from the safetensors header), under the same names as tensors, always filled.
    """

    path: Path
    family: Family
    source: Source
    config_fields: dict[str, Any]
    camera_names: tuple[str, ...]
    image_sizes: tuple[tuple[int, int], ...]
    state_size: int
    action_size: int
    action_names: tuple[str, ...] | None
    tensors: dict[str, torch.Tensor]
    norm: NormStats
    tokenizer: Path | None
    tokenizer_name: str
    notes: tuple[str, ...]
    shapes: dict[str, Shape] = field(default_factory=dict)


def check_sizes(fields: dict[str, Any], path: Path) -> None:
    """Refuse config_fields no pi0 network can run with (`path` names the config file)."""
    for name in ("chunk_size", "n_action_steps", "max_state_dim", "max_action_dim"):
        if fields[name] < 1:
            raise CheckpointError(f"{path}: {name} must be at least 1, not {fields[name]}")
    if fields["num_inference_steps"] < 1 or fields["tokenizer_max_length"] < 1:
        raise CheckpointError(
            f"{path}: num_inference_steps and tokenizer_max_length must be at least 1"
        )
    if fields["n_action_steps"] > fields["chunk_size"]:
        raise CheckpointError(
            f"{path}: n_action_steps ({fields['n_action_steps']}) exceeds chunk_size "
            f"({fields['chunk_size']})"
        )
    height, width = fields["image_resolution"]
    if height != width or height < 1:
        raise CheckpointError(
            f"{path}: image_resolution {height}x{width} is not square; PaliGemma needs a square"
        )


def fix_keys(values: dict[str, _Value], family: Family, notes: list[str]) -> dict[str, _Value]:
    """The renames of LeRobot's `_fix_pytorch_state_dict_keys` (modeling_pi0.py / _pi05.py),
    applied to keys without the `model.` prefix; `values` are tensors or header shapes."""
    fixed: dict[str, _Value] = {}
    dropped: list[str] = []
    old_mlp, new_mlp = ("time_mlp_", "action_time_mlp_")
    if family == "pi05":
        old_mlp, new_mlp = new_mlp, old_mlp
    for key, value in values.items():
        if family == "pi05" and (key.startswith("state_proj.") or _plain_expert_norm(key)):
            dropped.append(key)  # pi0.5 feeds the state as text; its expert norms are adaRMS
            continue
        if key.startswith(f"{old_mlp}in.") or key.startswith(f"{old_mlp}out."):
            key = new_mlp + key.removeprefix(old_mlp)
        fixed[key] = value
    if dropped:
        notes.append(f"dropped {len(dropped)} tensors pi0.5 has no use for ({dropped[0]}, ...)")
    if LM_HEAD in fixed and EMBED_TOKENS not in fixed:
        fixed[EMBED_TOKENS] = fixed[LM_HEAD]  # tied weights: safetensors kept one name
        notes.append("the token embedding is the language model head (tied weights, one tensor)")
    return fixed


def _plain_expert_norm(key: str) -> bool:
    if not key.startswith(_EXPERT):
        return False
    rest = key.removeprefix(_EXPERT)
    if rest == "norm.weight":
        return True
    parts = rest.split(".")
    return (
        len(parts) == 4
        and parts[0] == "layers"
        and parts[1].isdigit()
        and parts[2] in ("input_layernorm", "post_attention_layernorm")
        and parts[3] == "weight"
    )
