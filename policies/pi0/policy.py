"""A LeRobot or openpi pi0 / pi0.5 directory -> the policy Tempo serves (a TensorPolicy).

    converted = read_pi0_policy("pi0_dir/", joint_names=None)   # .policy, .layout, .notes
    policy = converted.policy                                   # Pi0Step + Pi0Codec + spec

The spec: the checkpoint's cameras at their recorded frame sizes, its state and action sizes,
one state per observation, `chunk_size`, and execution as LeRobot and openpi play a chunk:
`n_action_steps` actions, then the next inference (query period n_action_steps, the newest
chunk as it is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from controller.errors import CheckpointError
from policies.base import CameraSpec, Execution, PolicySpec, PromptSpec
from policies.checkpoints.files import describe_validation_error, read_json
from policies.meta_device import shapes_only
from policies.pi0.checkpoint_contents import WIDTHS_FILE
from policies.pi0.checkpoint_files import Pi0CheckpointFiles, read_pi0_checkpoint
from policies.pi0.from_checkpoint import network_config
from policies.pi0.norm_stats import FeatureStats, NormStats
from policies.pi0.step import AffineNorm, Pi0Step, Pi0StepConfig
from policies.pi0.weights import EMBED_TOKENS_KEY
from policies.tensor_policy import TensorPolicy, with_state_bounds


@dataclass
class ConvertedPi0:
    """What the registry's readers return (policies.registry.ConvertedPolicy)."""

    policy: TensorPolicy
    layout: str
    notes: list[str] = field(default_factory=list)


def affine(
    stats: FeatureStats, eps: float, convention: str, inverse: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(center, scale) of one vector's normalization, as the checkpoint's program computes it:
    LeRobot adds eps to std and puts eps for an empty range; openpi adds its eps to both.
    `inverse`: the unnormalization's, which differs in one case: LeRobot's MEAN_STD
    unnormalizer multiplies by std itself, without eps."""
    size = stats.size
    if stats.mode == "IDENTITY":
        return torch.zeros(size), torch.ones(size)
    if stats.mode == "MEAN_STD":
        if stats.mean is None or stats.std is None:  # the reader refuses these; say so anyway
            raise CheckpointError("MEAN_STD normalization needs mean and std statistics")
        if inverse and convention == "lerobot":
            return stats.mean.float(), stats.std.float()
        return stats.mean.float(), stats.std.float() + eps
    low, high = (stats.min, stats.max) if stats.mode == "MIN_MAX" else (stats.q01, stats.q99)
    if low is None or high is None:
        raise CheckpointError(f"{stats.mode} normalization needs its low and high statistics")
    span = high.float() - low.float()
    if convention == "openpi":
        span = span + eps
    else:
        span = torch.where(span == 0, torch.full_like(span, eps), span)
    return low.float() + span / 2, span / 2


def set_norm(
    norm: AffineNorm, stats: FeatureStats, eps: float, convention: str, inverse: bool = False
) -> None:
    center, scale = affine(stats, eps, convention, inverse)
    with torch.no_grad():
        norm.center.copy_(center)
        norm.scale.copy_(scale)


def step_config(files: Pi0CheckpointFiles, widths: dict[str, Any] | None = None) -> Pi0StepConfig:
    sizes = tuple((int(h), int(w)) for h, w in files.image_sizes)
    return Pi0StepConfig(
        network=network_config(files, widths),
        state_size=files.state_size,
        action_size=files.action_size,
        camera_sizes=sizes,
        state_norm=files.norm.state.mode,
        action_norm=files.norm.action.mode,
    )


def build_step(
    files: Pi0CheckpointFiles, config: Pi0StepConfig, device: str | torch.device = "cpu"
) -> Pi0Step:
    """The step module on `device` with the checkpoint's weights and statistics, eval mode.
    Built on the meta device and materialized uninitialised: every weight comes from the
    checkpoint, and the real size's random initialisation took minutes on a host."""
    with shapes_only():
        step = Pi0Step(config)
    step.to_empty(device=device)
    step.network.reset_buffers()
    try:
        step.network.load_weights(files.tensors)
    except ValueError as exc:  # the network's own sentence, said of this checkpoint
        raise CheckpointError(
            f"{files.path}: {exc}; the weights and the config (config.json, tempo_widths.json) "
            "come from different models"
        ) from None
    load_norms(step, files.norm)
    return step.eval()


def load_norms(step: Pi0Step, norm: NormStats) -> None:
    set_norm(step.state_norm, norm.state, norm.eps, norm.convention)
    # The step only unnormalizes actions: their scale is the unnormalizer's.
    set_norm(step.action_norm, norm.action, norm.eps, norm.convention, inverse=True)


def prompt_spec(
    files: Pi0CheckpointFiles, tokenizer: Path | None = None, default_task: str | None = None
) -> PromptSpec | None:
    """The prompt the policy reads: its tokenizer is `tokenizer`, else the one the checkpoint
    ships (tokenizer/tokenizer.model); None when there is neither (serve_settings then asks
    for policy.prompt.tokenizer)."""
    if tokenizer is None and files.tokenizer is not None:
        shipped = files.tokenizer / "tokenizer.model"
        tokenizer = shipped if shipped.is_file() else None
    if tokenizer is None:
        return None
    return PromptSpec(
        tokenizer=str(Path(tokenizer).resolve()),
        max_length=int(files.config_fields["tokenizer_max_length"]),
        vocab_size=int(files.shapes[EMBED_TOKENS_KEY][0]),
        template=files.family,
        default_task=default_task,
    )


def pi0_spec(
    files: Pi0CheckpointFiles, joint_names: Sequence[str] | None, where: Path
) -> PolicySpec:
    names = tuple(joint_names or files.action_names or ())
    if not names:
        names = tuple(f"joint_{i}" for i in range(files.action_size))
    if len(names) != files.action_size:
        raise CheckpointError(
            f"{where}: policy.joint_names has {len(names)} names, the checkpoint's actions "
            f"have {files.action_size} entries"
        )
    fields = files.config_fields
    steps = int(fields.get("n_action_steps", fields["chunk_size"]))
    execution = Execution(
        query_period=steps,
        ensemble="newest",
        source=f"{files.source} {files.family} config: n_action_steps={steps}",
    )
    return PolicySpec(
        cameras=tuple(
            CameraSpec(name=name, height=int(h), width=int(w))
            for name, (h, w) in zip(files.camera_names, files.image_sizes, strict=True)
        ),
        state_size=files.state_size,
        joint_names=names,
        chunk_size=int(fields["chunk_size"]),
        execution=execution,
        prompt=prompt_spec(files),
    )


def pi0_policy(step: Pi0Step, spec: PolicySpec) -> TensorPolicy:
    """The step served with its codec (noise, prompt), its state bounds from the statistics."""
    from policies.pi0.codec import Pi0Codec

    policy = TensorPolicy(spec=spec, module=step, codec=Pi0Codec(spec, step))
    return with_state_bounds(policy)


def read_pi0_policy(
    directory: Path, joint_names: Sequence[str] | None, widths: dict[str, Any] | None = None
) -> ConvertedPi0:
    """A LeRobot or openpi pi0 / pi0.5 directory as the policy Tempo serves (on the host;
    the builder moves it to its device)."""
    files = read_pi0_checkpoint(directory)
    if widths is None and (directory / WIDTHS_FILE).is_file():
        widths = read_json(directory / WIDTHS_FILE)
    spec = pi0_spec(files, joint_names, directory)
    try:
        config = step_config(files, widths)
    except ValidationError as exc:
        raise CheckpointError(f"{directory}: {describe_validation_error(exc)}") from None
    step = build_step(files, config)
    layout = f"{files.source} {files.family}"
    return ConvertedPi0(pi0_policy(step, spec), layout, list(files.notes))


def with_prompt_settings(
    policy: TensorPolicy, tokenizer: Path | None, default_task: str | None
) -> TensorPolicy:
    """The policy with `policy.prompt.tokenizer` / `default_task` applied to its prompt; a
    checkpoint that ships no tokenizer needs the first (one sentence naming the field)."""
    step = policy.module
    if not isinstance(step, Pi0Step):
        raise TypeError(f"a pi0 policy's module is a Pi0Step, not {type(step).__name__}")
    prompt = policy.spec.prompt
    if tokenizer is None and prompt is None:
        raise CheckpointError(
            "policy.prompt.tokenizer is unset, this pi0 checkpoint ships no tokenizer "
            "(tokenizer/tokenizer.model) and the local Hugging Face cache holds none of the "
            "one it names (`tempo checkpoint inspect` names it): set policy.prompt.tokenizer "
            "to PaliGemma's SentencePiece model file (tokenizer.model)"
        )
    if tokenizer is not None:
        if not Path(tokenizer).is_file():
            raise CheckpointError(f"policy.prompt.tokenizer: {tokenizer} is not a file")
        network = step.config.network
        prompt = PromptSpec(
            tokenizer=str(Path(tokenizer).resolve()),
            max_length=network.tokenizer_max_length,
            vocab_size=network.vocab_size,
            template="pi05" if not step.uses_state else "pi0",
        )
    if prompt is None:  # unreachable: said above
        raise CheckpointError("policy.prompt.tokenizer is needed")
    if default_task is not None:
        prompt = prompt.model_copy(update={"default_task": default_task})
    spec = policy.spec.model_copy(update={"prompt": prompt})
    return pi0_policy(step, spec)
