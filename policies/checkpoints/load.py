"""The front door for checkpoint directories: load one, or describe it, whatever its format.

    policy = load_checkpoint("ckpt/", device="cuda")   # a TensorPolicy, FP32 (or W4A8), eval
    print(describe_checkpoint("ckpt/"))                # spec, architecture, weights file

A directory is a Tempo checkpoint (`config.json` with `"format": "tempo"`,
`policies.checkpoints.tempo_format`) or a LeRobot ACT directory (`config.json` with
`"type": "act"`, converted in memory by `policies.checkpoints.lerobot`, whose `import_lerobot`
writes the converted form to disk). Every problem is a `CheckpointError` naming the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch
from safetensors import safe_open

from controller.errors import CheckpointError
from policies.act.backbone import feature_map_size
from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.base import PolicySpec
from policies.checkpoints.execution import describe as describe_execution
from policies.checkpoints.files import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    detect_format,
    locate_checkpoint,
)
from policies.checkpoints.lerobot import read_lerobot_act
from policies.checkpoints.quantized import read_quantized_checkpoint
from policies.checkpoints.tempo_format import (
    FORMAT_VERSION,
    parse_tempo_config,
    read_tempo_checkpoint,
)
from policies.flow.config import FlowConfig
from policies.tdmpc2.config import TDMPC2Config
from policies.tensor_policy import TensorPolicy


def load_checkpoint(
    directory: str | Path,
    device: str | torch.device = "cpu",
    joint_names: Sequence[str] | None = None,
) -> TensorPolicy:
    """Load a Tempo checkpoint, or a LeRobot ACT directory, as an FP32 module in eval mode.
    `joint_names` names the action entries (policy.joint_names): a LeRobot directory takes them
    as its names, a Tempo checkpoint (which records its own) must agree with them."""
    directory = locate_checkpoint(directory)
    kind, raw = detect_format(directory)
    if kind == "lerobot":
        policy = read_lerobot_act(directory, joint_names=joint_names).policy
    elif raw.get("quantization") is not None:
        policy = read_quantized_checkpoint(directory, raw)
    else:
        policy = read_tempo_checkpoint(directory, raw)
    if kind != "lerobot" and joint_names is not None:
        if tuple(joint_names) != policy.spec.joint_names:
            raise CheckpointError(
                f"policy.joint_names ({', '.join(joint_names)}) differ from the names "
                f"{directory / CONFIG_FILE} records ({', '.join(policy.spec.joint_names)}); "
                "unset policy.joint_names, or re-export the checkpoint with the new names"
            )
    policy.module.to(device).eval()
    return policy


def describe_checkpoint(directory: str | Path, problems: list[str] | None = None) -> str:
    """A human-readable summary of a Tempo checkpoint or a LeRobot ACT directory.

    A Tempo checkpoint is described from its config and the safetensors header, without loading
    weights; a LeRobot directory is read in full, since converting it is how it is checked.
    What would stop the checkpoint from being served (unreadable or missing weights) is also
    appended to `problems` when given.
    """
    directory = locate_checkpoint(directory)
    kind, raw = detect_format(directory)
    if kind == "lerobot":
        imported = read_lerobot_act(directory)
        header = [f"format: LeRobot ACT ({imported.layout})"] + [
            f"note: {note}" for note in imported.notes
        ]
        spec, config = imported.policy.spec, cast(ACT, imported.policy.module).config
    else:
        parsed = parse_tempo_config(raw, directory / CONFIG_FILE)
        header = [
            f"format: Tempo checkpoint (format_version {FORMAT_VERSION}), policy type "
            f"{parsed.policy_type}"
        ]
        if isinstance(parsed.model, FlowConfig):
            lines = summarize_flow(parsed.spec, parsed.model, directory / WEIGHTS_FILE, problems)
            return "\n".join(header + lines) + "\n"
        if isinstance(parsed.model, TDMPC2Config):
            lines = summarize_tdmpc2(parsed.spec, parsed.model, directory / WEIGHTS_FILE, problems)
            return "\n".join(header + lines) + "\n"
        q = getattr(parsed, "quantization", None)
        if q is not None:
            header.append(
                f"quantization: {q.scheme} {q.settings.method}, {len(q.layers)} layers, "
                f"{q.settings.activations} activation scales, calibrated on {q.observations} "
                f"observations ({q.source})"
            )
        spec, config = parsed.spec, parsed.model
    lines = summarize(spec, config, directory / WEIGHTS_FILE, problems)
    return "\n".join(header + lines) + "\n"


def summarize_tdmpc2(
    spec: PolicySpec, config: TDMPC2Config, weights: Path, problems: list[str] | None = None
) -> list[str]:
    """Lines describing a TD-MPC2 agent: sizes, planner settings, weights file."""
    c = config
    lines = [
        f"state: {spec.state_size} entries; joints ({spec.action_dim}): "
        + ", ".join(spec.joint_names),
        f"world model: size {c.model_size}M (latent {c.latent_dim}, mlp {c.mlp_dim}, encoder "
        f"{c.enc_dim} x {c.num_enc_layers} layers, {c.num_q} Q heads"
        + (", termination head)" if c.episodic else ")"),
        f"mode: {c.mode}; planner: {c.num_samples} samples ({c.num_pi_trajs} from the prior), "
        f"{c.num_elites} elites, {c.planning_iterations} iterations, horizon {c.horizon} "
        f"(chunk of {spec.chunk_size}), discount {c.discount}, explore {c.explore}, compute "
        f"{c.compute}",
    ]
    return lines + describe_weights(weights, problems)


def summarize(
    spec: PolicySpec, config: ACTConfig, weights: Path, problems: list[str] | None = None
) -> list[str]:
    """Lines describing an ACT policy's interface, architecture and weights file; a weights
    file that is unreadable or missing is also appended to `problems` when given."""
    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras) or "none"
    lines = [f"cameras ({len(spec.cameras)}): {cameras}"]
    if config.n_cameras:
        dilate = config.replace_final_stride_with_dilation
        maps = [feature_map_size(h, w, dilate) for h, w in config.backbone_sizes]
        fed = sorted(set(config.backbone_sizes), key=config.backbone_sizes.index)
        shapes = sorted(set(maps), key=maps.index)
        lines.append(
            f"backbone: {config.vision_backbone}{', layer4 dilated' if dilate else ''}, frames "
            f"fed at {', '.join(f'{h}x{w}' for h, w in fed)}, feature map "
            f"{', '.join(f'{r}x{c}' for r, c in shapes)} ({sum(r * c for r, c in maps)} image "
            f"tokens; {len(config.frame_groups)} backbone batch(es), one per frame shape)"
        )
    hidden = config.state_input_mask.count(False) if config.state_input_mask else 0
    lines += [
        f"state: {spec.state_size} entries (robot {config.state_dim}, environment "
        f"{config.env_state_dim}) x history {spec.state_history}"
        + (f", {hidden} hidden by the input mask" if hidden else ""),
        f"joints ({spec.action_dim}): {', '.join(spec.joint_names)}",
        f"chunk size: {spec.chunk_size}",
        f"transformer: dim_model {config.dim_model}, {config.n_heads} heads, feedforward "
        f"{config.dim_feedforward} ({config.feedforward_activation}), "
        f"{config.n_encoder_layers} encoder / {config.n_decoder_layers} decoder layer(s), "
        f"{'pre' if config.pre_norm else 'post'}-norm, latent {config.latent_dim}"
        + (
            f", VAE encoder kept ({config.n_vae_encoder_layers} layers, unused)"
            if config.use_vae
            else ""
        ),
        f"normalization: images {config.image_norm}, state {config.state_norm}, environment "
        f"{config.env_state_norm}, actions {config.action_norm}",
    ]
    lines.append(describe_execution(spec.execution))
    with torch.device("meta"):
        module = ACT(config)
    n_params = sum(p.numel() for p in module.parameters())
    n_serving = n_params - sum(
        p.numel() for name, p in module.named_parameters() if name.startswith("vae_encoder")
    )
    lines.append(f"parameters: {n_params:,} ({n_serving:,} used when serving)")
    return lines + describe_weights(weights, problems)


def summarize_flow(
    spec: PolicySpec, config: FlowConfig, weights: Path, problems: list[str] | None = None
) -> list[str]:
    """Lines describing a flow-matching policy's interface, architecture and weights file."""
    from policies.flow.model import FlowMatchingPolicy

    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras)
    rows, cols = feature_map_size(config.image_height, config.image_width)
    with torch.device("meta"):
        n_params = sum(p.numel() for p in FlowMatchingPolicy(config).parameters())
    lines = [
        f"cameras ({len(spec.cameras)}): {cameras}",
        f"backbone: {config.vision_backbone}, feature map {rows}x{cols} "
        f"({rows * cols * config.n_cameras} image tokens)",
        f"state: {spec.state_size} entries x history {spec.state_history}",
        f"joints ({spec.action_dim}): {', '.join(spec.joint_names)}",
        f"chunk size (H): {spec.chunk_size}, {config.n_steps} Euler steps",
        f"transformer: dim_model {config.dim_model}, {config.n_heads} heads, feedforward "
        f"{config.dim_feedforward}, {config.n_context_layers} context / "
        f"{config.n_expert_layers} action-expert layer(s)",
        f"normalization: images {config.image_norm}, state {config.state_norm}, actions "
        f"{config.action_norm}",
        f"parameters: {n_params:,}",
    ]
    return lines + describe_weights(weights, problems)


def describe_weights(weights: Path, problems: list[str] | None = None) -> list[str]:
    """One line about the safetensors file: size and tensor count, or why it is unreadable;
    a file missing or unreadable (the checkpoint cannot be served) is also appended to
    `problems` when given."""
    lines: list[str] = []
    if weights.is_file():
        try:
            with safe_open(str(weights), framework="pt") as handle:
                count = len(list(handle.keys()))
            size_mb = weights.stat().st_size / 1e6
            lines.append(f"weights: {weights.name}, {size_mb:.1f} MB, {count} tensors")
        except Exception as exc:  # describe a bad header rather than fail
            lines.append(f"weights: {weights.name} is unreadable ({exc})")
            if problems is not None:
                problems.append(f"{weights} is unreadable ({exc}); it cannot be served")
    else:
        lines.append(f"weights: {weights.name} is missing")
        if problems is not None:
            problems.append(f"{weights} is missing; this checkpoint cannot be served")
    return lines
