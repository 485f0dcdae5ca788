"""Read a pi0 / pi0.5 checkpoint, as LeRobot or openpi writes it, into one neutral form.

    files = read_pi0_checkpoint("~/ckpt/pi05_droid_pytorch")
    files.family, files.source, files.config_fields["chunk_size"], files.tensors, files.norm
    read_pi0_checkpoint("~/ckpt/pi05_droid_pytorch", tensors=False).shapes   # header only

LeRobot (`PI0Policy` / `PI05Policy.save_pretrained`):

    config.json          `"type": "pi0"` / `"pi05"` and every PI0Config / PI05Config field
                         (draccus), `input_features` / `output_features` with shapes.
    model.safetensors    PI0Pytorch's state dict under `model.` (`model.state_proj.weight`,
                         `model.paligemma_with_expert.paligemma.model.vision_tower...`).
    policy_preprocessor.json, policy_postprocessor.json and their normalizer state files
                         (see `policies.pi0.norm_stats`); a `tokenizer/` folder where the
                         tokenizer step saved its tokenizer.

openpi (`examples/convert_jax_model_to_pytorch.py`):

    config.json          {"action_dim", "action_horizon", "paligemma_variant",
                         "action_expert_variant", "precision"}; nothing says pi0 or pi0.5,
                         so the weights do (pi0.5 has `time_mlp_in`, pi0 `state_proj`).
    model.safetensors    PI0Pytorch's state dict, no prefix; `save_model` drops the tied
                         `...paligemma.model.language_model.embed_tokens.weight` (kept:
                         `...paligemma.lm_head.weight`).
    assets/<asset_id>/norm_stats.json

`tensors` are in PI0Pytorch's key space without the `model.` prefix, renamed the way LeRobot's
`_fix_pytorch_state_dict_keys` does; `tensors=False` reads the weights' shapes from the
safetensors header and loads none (`tempo checkpoint inspect`). No pickle is read: a directory
with only .bin / .pt / .pth weights is refused. The two layouts are read by
`policies.pi0.lerobot_files` and `policies.pi0.openpi_files`, into the form of
`policies.pi0.checkpoint_contents`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from controller.errors import CheckpointError
from policies.checkpoints.files import (
    CONFIG_FILE,
    FORMAT,
    WEIGHTS_FILE,
    locate_checkpoint,
    read_json,
)
from policies.checkpoints.hub_cache import cached_snapshot
from policies.pi0.checkpoint_contents import Pi0CheckpointFiles
from policies.pi0.lerobot_files import read_lerobot_pi0
from policies.pi0.openpi_files import read_openpi_pi0

__all__ = ["PICKLE_SUFFIXES", "Pi0CheckpointFiles", "read_pi0_checkpoint"]

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def read_pi0_checkpoint(
    path: str | Path, *, asset_id: str | None = None, tensors: bool = True
) -> Pi0CheckpointFiles:
    """Read the LeRobot or openpi pi0 / pi0.5 directory `path` (for openpi, the norm stats of
    `asset_id`, needed only when assets/ holds several), or a CheckpointError saying why not.
    With `tensors=False` no weight is loaded: `shapes` comes from the safetensors header and
    `tensors` is empty (the small normalization statistics are still read and checked)."""
    src = locate_checkpoint(Path(path).expanduser())
    if not src.is_dir():
        raise CheckpointError(f"checkpoint directory {src} does not exist or is not a folder")
    if not (src / CONFIG_FILE).exists() and (src / "params").is_dir():
        raise CheckpointError(
            f"{src} is an openpi JAX checkpoint (params/); convert it to PyTorch with openpi's "
            "examples/convert_jax_model_to_pytorch.py first"
        )
    raw = read_json(src / CONFIG_FILE)
    _require_safetensors(src)
    if "type" in raw and "format" not in raw:
        return _with_cached_tokenizer(read_lerobot_pi0(src, raw, tensors=tensors))
    if raw.get("format") == FORMAT:
        raise CheckpointError(f"{src} is a Tempo checkpoint, not a pi0 one; load it directly")
    if "action_horizon" in raw and "action_dim" in raw:
        return _with_cached_tokenizer(read_openpi_pi0(src, raw, asset_id, tensors=tensors))
    raise CheckpointError(
        f'{src / CONFIG_FILE} is neither a LeRobot policy config (no "type") nor an openpi '
        "PyTorch config (no action_horizon and action_dim); point at a pi0 or pi0.5 checkpoint"
    )


def _require_safetensors(src: Path) -> None:
    if (src / WEIGHTS_FILE).exists():
        return
    pickled = sorted(p.name for p in src.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickled:
        raise CheckpointError(
            f"{src} holds its weights as {pickled[0]}, a pickle file Tempo does not load; "
            f"convert them to {WEIGHTS_FILE}"
        )
    raise CheckpointError(f"{src / WEIGHTS_FILE} is missing; a pi0 checkpoint needs its weights")


def _with_cached_tokenizer(files: Pi0CheckpointFiles) -> Pi0CheckpointFiles:
    """A checkpoint that ships no tokenizer reads the one it names from the local Hugging Face
    cache, as LeRobot does (offline: nothing is fetched), and says so in a note."""
    if files.tokenizer is not None:
        return files
    # Tempo reads PaliGemma's SentencePiece model (prompt_spec), not tokenizer.json alone.
    snapshot = cached_snapshot(files.tokenizer_name, ("tokenizer.model",))
    if snapshot is None:
        return files
    note = f"tokenizer {files.tokenizer_name} read from the local Hugging Face cache ({snapshot})"
    return dataclasses.replace(files, tokenizer=snapshot, notes=(*files.notes, note))
