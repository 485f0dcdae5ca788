"""Quantized Tempo checkpoints: the Tempo format with W4A8 layers (see `policies.quant`), for
every family with a `QuantTarget` (ACT: this module's VARIANT; pi0 and pi0.5:
policies.pi0.quantized).

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
    fp32_reference.prompt_ids / .prompt_mask     their prompts' token ids (a prompted policy)

A policy that reads a prompt (pi0, pi0.5) has its tokenizer copied along, as
tokenizer/tokenizer.model, and the spec names it relative to the directory (made absolute when
read). Normalization statistics are buffers and the widths are in the model config, as in
every Tempo checkpoint.

Each family's quantized checkpoints are a variant of its checkpoints (`quantized_variant`,
listed in policies.registry): loading builds the target's empty module of the config, puts
empty QuantLinear shells where the layouts say, then loads every tensor with the usual checks
(names, shapes, kinds, finite). Nothing is calibrated or transformed at start-up.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from controller.errors import CheckpointError
from policies.base import PolicySpec, PromptTokens
from policies.checkpoints.files import CONFIG_FILE, WEIGHTS_FILE, read_tensors
from policies.checkpoints.tempo_format import (
    check_spec_matches,
    checkpoint_family,
    family_of_module,
    load_weights,
    parse_tempo_config,
    write_checkpoint_files,
)
from policies.quant.act import ACT_TARGET
from policies.quant.config import Quantization
from policies.quant.numerics import pack_int4, unpack_int4
from policies.quant.target import QuantTarget
from policies.registry import CheckpointVariant
from policies.tensor_policy import ReferenceChunks, TensorPolicy

if TYPE_CHECKING:
    from policies.quant.layer import QuantLinear

# The quantized layers (policies.quant.layer) are imported where a quantized policy is saved or
# read, not here: every Tempo checkpoint's load imports this module to learn of the variant, and
# on a GPU the layers' Triton ops import torch's compiler (seconds of a start).

REFERENCE_PREFIX = "fp32_reference."


def save_quantized_checkpoint(
    directory: str | Path,
    policy: TensorPolicy,
    quantization: Quantization,
    policy_type: str | None = None,
) -> Path:
    """Write a quantized policy (its QuantLinear layers as `quantization` describes, its
    reference chunks if any, its tokenizer if it reads a prompt) as a Tempo checkpoint into
    `directory`. policy_type: the family's name, where families share a module type (a
    Pi0Step is pi0's or pi0.5's: `QuantTarget.policy_type`)."""
    module = policy.module
    if family_of_module(module) is None:
        raise CheckpointError(
            f"cannot save a {type(module).__name__} module: no policy family's checkpoints hold it"
        )
    check_spec_matches(policy.spec, module.config, "the policy being saved")  # type: ignore[arg-type]
    from policies.quant.layer import QuantLinear

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
        tensors.update(_reference_tensors(policy.reference))
    return write_checkpoint_files(
        directory,
        policy,
        tensors,
        config_extra={"quantization": quantization.model_dump(mode="json")},
        metadata_extra={"quantization": quantization.scheme},
        policy_type=policy_type,
    )


def _reference_tensors(reference: ReferenceChunks) -> dict[str, torch.Tensor]:
    arrays = {"images": reference.images, "state": reference.state, "chunks": reference.chunks}
    if reference.prompts is not None:
        arrays["prompt_ids"] = np.stack([p.ids for p in reference.prompts]).astype(np.int64)
        arrays["prompt_mask"] = np.stack([p.mask for p in reference.prompts]).astype(np.uint8)
    return {
        REFERENCE_PREFIX + name: torch.from_numpy(np.ascontiguousarray(array))
        for name, array in arrays.items()
    }


def read_quantized_checkpoint(
    directory: Path, raw: dict[str, Any], target: QuantTarget = ACT_TARGET
) -> TensorPolicy:
    """The quantized policy in `directory` (config.json already read into `raw`): the
    target's module with QuantLinear layers, eval mode, on the CPU, with its reference chunks."""
    source = directory / WEIGHTS_FILE
    parsed = parse_tempo_config(raw, directory / CONFIG_FILE)
    quantization = getattr(parsed, "quantization", None)
    if quantization is None:
        raise CheckpointError(f"{directory / CONFIG_FILE} has no quantization section")
    hooks = checkpoint_family(parsed.policy_type, str(directory / CONFIG_FILE))[1]
    tensors = read_tensors(source)
    reference_tensors = {
        name.removeprefix(REFERENCE_PREFIX): tensors.pop(name)
        for name in list(tensors)
        if name.startswith(REFERENCE_PREFIX)
    }
    from policies.quant.apply import quantized_shell
    from policies.quant.layer import QuantLinear

    module = target.empty_module(parsed.model)
    try:
        quantized_shell(module, quantization.layers, quantization.settings)
    except ValueError as exc:
        raise CheckpointError(f"{directory / CONFIG_FILE}: {exc}") from None
    module = target.materialize(module)
    if not quantization.settings.packed_weights:
        for name, layer in module.named_modules():
            if isinstance(layer, QuantLinear):
                key = f"{name}.weight_packed"
                if key in tensors:
                    tensors[f"{name}.weight_q"] = _unpack(tensors.pop(key), layer, source, key)
    tensors = {k: v for k, v in tensors.items() if not k.endswith("num_batches_tracked")}
    load_weights(module, tensors, source)
    spec = parsed.spec  # its tokenizer resolved against the directory (parse_tempo_config)
    module = module.eval()
    if hooks.to_policy is not None:
        policy = hooks.to_policy(module, spec)
    else:
        policy = TensorPolicy(spec=spec, module=module)
    policy.reference = _reference(reference_tensors, spec, source)
    return policy


def _unpack(packed: torch.Tensor, layer: QuantLinear, source: Path, key: str) -> torch.Tensor:
    try:
        return unpack_int4(packed, layer.width)
    except ValueError as exc:
        raise CheckpointError(f"{source}: {key}: {exc}") from None


def _reference(
    tensors: dict[str, torch.Tensor], spec: PolicySpec, source: Path
) -> ReferenceChunks | None:
    if not tensors:
        return None
    missing = {"images", "state", "chunks"} - set(tensors)
    if missing:
        raise CheckpointError(f"{source}: {REFERENCE_PREFIX}{sorted(missing)[0]} is missing")
    # Copies (images) and astype (the rest) own their memory: the tensors are mapped from the
    # file, which may be overwritten in place while the policy is served.
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
        images=images.copy(),
        state=state.astype(np.float32),
        chunks=chunks.astype(np.float32),
        prompts=_reference_prompts(tensors, spec, n, source),
    )


def _reference_prompts(
    tensors: dict[str, torch.Tensor], spec: PolicySpec, n: int, source: Path
) -> tuple[PromptTokens, ...] | None:
    if spec.prompt is None:
        return None
    length = spec.prompt.max_length
    ids, mask = tensors.get("prompt_ids"), tensors.get("prompt_mask")
    if ids is None or mask is None or ids.shape != (n, length) or mask.shape != (n, length):
        raise CheckpointError(
            f"{source}: the policy reads a prompt, so {REFERENCE_PREFIX}prompt_ids and "
            f"prompt_mask must be ({n}, {length}) each"
        )
    return tuple(
        PromptTokens(ids[i].numpy().astype(np.int64), mask[i].numpy().astype(bool))
        for i in range(n)
    )


def describe_quantization(q: Quantization) -> list[str]:
    """`tempo checkpoint inspect`'s line about the quantization section."""
    vision = ", vision tower included" if q.settings.vision else ""
    return [
        f"quantization: {q.scheme} {q.settings.method}, {len(q.layers)} layers{vision}, "
        f"{q.settings.activations} activation scales, calibrated on {q.observations} "
        f"observations ({q.source})"
    ]


def quantized_variant(family: str, target: QuantTarget) -> CheckpointVariant:
    """The quantized checkpoints of `family` (policies.registry.VARIANTS lists the modules
    defining one each)."""
    return CheckpointVariant(
        family=family,
        section="quantization",
        section_model=Quantization,
        read=partial(read_quantized_checkpoint, target=target),
        describe=describe_quantization,
    )


VARIANT = quantized_variant("act", ACT_TARGET)
