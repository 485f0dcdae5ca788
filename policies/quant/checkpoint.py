"""Quantized Tempo checkpoints: the Tempo format with W4A8 layers (see `policies.quant`).

config.json is a Tempo config with one more section, `"quantization"` (`Quantization`: the
settings, and each quantized layer's layout by name). model.safetensors holds

    every unquantized parameter and buffer       float32, as in any Tempo checkpoint
    <layer>.weight_packed                        uint8 (out, width / 2): 4-bit codes, two a byte
    <layer>.weight_scale                         float32 (out,) per output channel
    <layer>.act_scale                            float32 () static int8 scale (absent: per token)
    <layer>.rot_in, .perm, .rot_mix, .out_rot    the DuQuant transform (each may be absent)
    <layer>.bias                                 float32
    fp32_reference.images / .state / .chunks     the FP32 unquantized model's chunks on a few
                                                 observations: every tier is checked against
                                                 them at start-up (`ReferenceChunks`)

It is a variant of the act family's checkpoints (`VARIANT`, listed in policies.registry):
loading builds the ACT of the config, splits its attention and puts empty QuantLinear shells
where the layouts say, then loads every tensor with the usual checks (names, shapes, kinds,
finite).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from controller.errors import CheckpointError
from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.checkpoints.files import CONFIG_FILE, WEIGHTS_FILE, read_tensors
from policies.checkpoints.tempo_format import (
    check_spec_matches,
    load_weights,
    parse_tempo_config,
    write_checkpoint_files,
)
from policies.quant.apply import quantized_shell
from policies.quant.config import Quantization
from policies.quant.layer import QuantLinear
from policies.quant.numerics import pack_int4, unpack_int4
from policies.registry import CheckpointVariant
from policies.tensor_policy import ReferenceChunks, TensorPolicy

REFERENCE_PREFIX = "fp32_reference."


def save_quantized_checkpoint(
    directory: str | Path, policy: TensorPolicy, quantization: Quantization
) -> Path:
    """Write a quantized ACT policy (its QuantLinear layers as `quantization` describes, and
    its reference chunks if any) as a Tempo checkpoint into `directory`."""
    module = policy.module
    if not isinstance(module, ACT):
        raise CheckpointError(
            f"cannot save a {type(module).__name__} module: Tempo checkpoints hold ACT models only"
        )
    check_spec_matches(policy.spec, module.config, "the policy being saved")
    found = {n for n, m in module.named_modules() if isinstance(m, QuantLinear)}
    if found != set(quantization.layers):
        raise CheckpointError(
            "the quantization record does not list the module's quantized layers "
            f"({len(found)} in the module, {len(quantization.layers)} in the record)"
        )
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in module.state_dict().items():
        tensor = tensor.detach().cpu()
        if name.endswith(".weight_q"):  # one code per byte in memory, two in the file
            tensors[name.removesuffix("weight_q") + "weight_packed"] = pack_int4(tensor)
        elif tensor.is_floating_point():
            tensors[name] = tensor.to(torch.float32).contiguous().clone()
        else:
            tensors[name] = tensor.contiguous().clone()
    if policy.reference is not None:
        reference = policy.reference
        tensors[REFERENCE_PREFIX + "images"] = torch.from_numpy(
            np.ascontiguousarray(reference.images)
        )
        tensors[REFERENCE_PREFIX + "state"] = torch.from_numpy(
            np.ascontiguousarray(reference.state)
        )
        tensors[REFERENCE_PREFIX + "chunks"] = torch.from_numpy(
            np.ascontiguousarray(reference.chunks)
        )
    return write_checkpoint_files(
        directory,
        policy,
        tensors,
        config_extra={"quantization": quantization.model_dump(mode="json")},
        metadata_extra={"quantization": quantization.scheme},
    )


def read_quantized_checkpoint(directory: Path, raw: dict[str, Any]) -> TensorPolicy:
    """The quantized policy in `directory` (config.json already read into `raw`): an ACT with
    QuantLinear layers, eval mode, on the CPU, with its reference chunks."""
    source = directory / WEIGHTS_FILE
    parsed = parse_tempo_config(raw, directory / CONFIG_FILE)
    quantization = getattr(parsed, "quantization", None)
    if quantization is None or not isinstance(parsed.model, ACTConfig):
        raise CheckpointError(f"{directory / CONFIG_FILE} has no quantization section")
    tensors = read_tensors(source)
    reference_tensors = {
        name.removeprefix(REFERENCE_PREFIX): tensors.pop(name)
        for name in list(tensors)
        if name.startswith(REFERENCE_PREFIX)
    }
    with torch.no_grad():
        module = ACT(parsed.model)
    try:
        quantized_shell(module, quantization.layers, quantization.settings)
    except ValueError as exc:
        raise CheckpointError(f"{directory / CONFIG_FILE}: {exc}") from None
    if not quantization.settings.packed_weights:
        for name, layer in module.named_modules():
            if isinstance(layer, QuantLinear):
                key = f"{name}.weight_packed"
                if key in tensors:
                    tensors[f"{name}.weight_q"] = _unpack(tensors.pop(key), layer, source, key)
    tensors = {k: v for k, v in tensors.items() if not k.endswith("num_batches_tracked")}
    load_weights(module, tensors, source)
    reference = _reference(reference_tensors, parsed.spec, source)
    return TensorPolicy(spec=parsed.spec, module=module.eval(), reference=reference)


def _unpack(packed: torch.Tensor, layer: QuantLinear, source: Path, key: str) -> torch.Tensor:
    try:
        return unpack_int4(packed, layer.width)
    except ValueError as exc:
        raise CheckpointError(f"{source}: {key}: {exc}") from None


def _reference(tensors: dict[str, torch.Tensor], spec: Any, source: Path) -> ReferenceChunks | None:
    if not tensors:
        return None
    missing = {"images", "state", "chunks"} - set(tensors)
    if missing:
        raise CheckpointError(f"{source}: {REFERENCE_PREFIX}{sorted(missing)[0]} is missing")
    images, state, chunks = (tensors[k].numpy() for k in ("images", "state", "chunks"))
    n = chunks.shape[0]
    expected = {
        "images": (
            n,
            len(spec.cameras),
            *(spec.cameras[0].shape[:2] if spec.cameras else (1, 1)),
            3,
        ),
        "state": (n, spec.state_history, spec.state_size),
        "chunks": (n, spec.chunk_size, spec.action_dim),
    }
    for name, array in (("images", images), ("state", state), ("chunks", chunks)):
        if tuple(array.shape) != expected[name]:
            raise CheckpointError(
                f"{source}: {REFERENCE_PREFIX}{name} has shape {tuple(array.shape)}, the spec "
                f"needs {expected[name]}"
            )
    if images.dtype != np.uint8 or not np.isfinite(chunks).all():
        raise CheckpointError(f"{source}: the FP32 reference chunks are malformed")
    return ReferenceChunks(
        images=images, state=state.astype(np.float32), chunks=chunks.astype(np.float32)
    )


def describe_quantization(q: Quantization) -> list[str]:
    """`tempo checkpoint inspect`'s line about the quantization section."""
    return [
        f"quantization: {q.scheme} {q.settings.method}, {len(q.layers)} layers, "
        f"{q.settings.activations} activation scales, calibrated on {q.observations} "
        f"observations ({q.source})"
    ]


VARIANT = CheckpointVariant(
    family="act",
    section="quantization",
    section_model=Quantization,
    read=read_quantized_checkpoint,
    describe=describe_quantization,
)
