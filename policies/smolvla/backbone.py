"""The widths of a SmolVLA checkpoint's backbone, which LeRobot's config.json does not hold:
LeRobot builds the vision encoder and the language model from the Hugging Face config of
`vlm_model_name` (SmolVLM2-500M-Video-Instruct for lerobot/smolvla_base), so Tempo reads that
config where LeRobot does, offline:

    the checkpoint's own copy, <checkpoint>/vlm_config.json        (Tempo writes none; a user may)
    the local Hugging Face cache's snapshot of vlm_model_name     (policies.checkpoints.hub_cache)
    the known widths of SmolVLM2-500M (policies.smolvla.config)   for that name only

and refuses a checkpoint naming another backbone it finds nowhere, in one sentence. The number
of language-model layers is the checkpoint's (LeRobot cuts the model to num_vlm_layers before
saving); every width is then checked against the weights' shapes when they are loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.errors import CheckpointError
from policies.checkpoints.files import read_json
from policies.checkpoints.hub_cache import cached_snapshot, hub_cache_dir
from policies.smolvla.config import (
    SMOLVLM2_500M,
    SMOLVLM2_500M_NAME,
    TextWidths,
    VisionWidths,
)

VLM_CONFIG_FILE = "vlm_config.json"  # a copy of the backbone's Hugging Face config.json


def backbone_fields(src: Path, vlm_name: str, depth: int) -> tuple[dict[str, Any], str]:
    """(SmolVLAConfig's backbone fields, where they came from) for a checkpoint whose
    language model keeps `depth` layers."""
    own = src / VLM_CONFIG_FILE
    if own.is_file():
        return _from_hf_config(read_json(own), own, depth), f"{VLM_CONFIG_FILE}"
    snapshot = cached_snapshot(vlm_name, ("config.json",))
    if snapshot is not None:
        path = snapshot / "config.json"
        return _from_hf_config(read_json(path), path, depth), f"{vlm_name} (Hugging Face cache)"
    if vlm_name == SMOLVLM2_500M_NAME:
        known = SMOLVLM2_500M
        text = TextWidths(depth=depth, head_dim=known["head_dim"], **known["text_widths"])
        fields = {k: v for k, v in known.items() if k not in ("text_widths", "head_dim")}
        return {**fields, "text": text}, f"{vlm_name} (Tempo's copy of its widths)"
    raise CheckpointError(
        f"{src} names the backbone {vlm_name!r}, whose Hugging Face config is neither in the "
        f"checkpoint ({VLM_CONFIG_FILE}) nor in the local Hugging Face cache ({hub_cache_dir()}); "
        f"Tempo knows only {SMOLVLM2_500M_NAME}'s widths by heart: copy the backbone's "
        f"config.json to {own}"
    )


def _section(raw: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    section = raw.get(name)
    if not isinstance(section, dict):
        raise CheckpointError(f"{path} has no {name} object; it is not a SmolVLM config")
    return section


def _int(section: dict[str, Any], name: str, path: Path, default: int | None = None) -> int:
    value = section.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CheckpointError(f"{path}: {name} must be an integer, not {value!r}")
    return value


def _from_hf_config(raw: dict[str, Any], path: Path, depth: int) -> dict[str, Any]:
    """SmolVLAConfig's backbone fields from a SmolVLM (or Idefics3) Hugging Face config."""
    if raw.get("model_type") not in ("smolvlm", "idefics3"):
        raise CheckpointError(
            f"{path} describes a {raw.get('model_type')!r} model, not SmolVLM's; SmolVLA's "
            "backbone is a SmolVLM"
        )
    vision, text = _section(raw, "vision_config", path), _section(raw, "text_config", path)
    heads = _int(text, "num_attention_heads", path)
    width = _int(text, "hidden_size", path)
    try:
        return {
            "vision": VisionWidths(
                width=_int(vision, "hidden_size", path),
                depth=_int(vision, "num_hidden_layers", path),
                mlp_dim=_int(vision, "intermediate_size", path),
                num_heads=_int(vision, "num_attention_heads", path),
                patch_size=_int(vision, "patch_size", path),
                image_size=_int(vision, "image_size", path),
            ),
            "text": TextWidths(
                width=width,
                depth=depth,
                mlp_dim=_int(text, "intermediate_size", path),
                num_heads=heads,
                num_kv_heads=_int(text, "num_key_value_heads", path, heads),
                head_dim=_int(text, "head_dim", path, width // heads),
            ),
            "scale_factor": _int(raw, "scale_factor", path, 2),
            "vocab_size": _int(text, "vocab_size", path),
            "rms_norm_eps": float(text.get("rms_norm_eps", 1e-5)),
            "layer_norm_eps": float(vision.get("layer_norm_eps", 1e-6)),
        }
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
