"""The front door for checkpoint directories: load one, or describe it, whatever its format.

    policy = load_checkpoint("ckpt/", device="cuda")   # a TensorPolicy, FP32 (or W4A8), eval
    print(describe_checkpoint("ckpt/"))                # spec, architecture, weights file

A directory is a Tempo checkpoint (`config.json` with `"format": "tempo"`,
`policies.checkpoints.tempo_format`) or a LeRobot ACT directory (`config.json` with
`"type": "act"`, converted in memory by `policies.checkpoints.lerobot`, whose `import_lerobot`
writes the converted form to disk). Every problem is a `CheckpointError` naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch
from safetensors import safe_open

from policies.act.backbone import feature_map_size
from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.base import PolicySpec
from policies.checkpoints.files import CONFIG_FILE, WEIGHTS_FILE, detect_format
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


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu") -> TensorPolicy:
    """Load a Tempo checkpoint, or a LeRobot ACT directory, as an FP32 module in eval mode."""
    directory = Path(directory)
    kind, raw = detect_format(directory)
    if kind == "lerobot":
        policy = read_lerobot_act(directory).policy
    elif raw.get("quantization") is not None:
        policy = read_quantized_checkpoint(directory, raw)
    else:
        policy = read_tempo_checkpoint(directory, raw)
    policy.module.to(device).eval()
    return policy


def describe_checkpoint(directory: str | Path) -> str:
    """A human-readable summary of a Tempo checkpoint or a LeRobot ACT directory.

    A Tempo checkpoint is described from its config and the safetensors header, without loading
    weights; a LeRobot directory is read in full, since converting it is how it is checked.
    """
    directory = Path(directory)
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
            lines = summarize_flow(parsed.spec, parsed.model, directory / WEIGHTS_FILE)
            return "\n".join(header + lines) + "\n"
        if isinstance(parsed.model, TDMPC2Config):
            lines = summarize_tdmpc2(parsed.spec, parsed.model, directory / WEIGHTS_FILE)
            return "\n".join(header + lines) + "\n"
        q = getattr(parsed, "quantization", None)
        if q is not None:
            header.append(
                f"quantization: {q.scheme} {q.settings.method}, {len(q.layers)} layers, "
                f"{q.settings.activations} activation scales, calibrated on {q.observations} "
                f"observations ({q.source})"
            )
        spec, config = parsed.spec, parsed.model
    return "\n".join(header + summarize(spec, config, directory / WEIGHTS_FILE)) + "\n"


def summarize_tdmpc2(spec: PolicySpec, config: TDMPC2Config, weights: Path) -> list[str]:
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
    return lines + _weights_line(weights)


def _weights_line(weights: Path) -> list[str]:
    if not weights.is_file():
        return [f"weights: {weights.name} is missing"]
    try:
        with safe_open(str(weights), framework="pt") as handle:
            count = len(list(handle.keys()))
    except Exception as exc:  # describe a bad header rather than fail
        return [f"weights: {weights.name} is unreadable ({exc})"]
    return [f"weights: {weights.name}, {weights.stat().st_size / 1e6:.1f} MB, {count} tensors"]


def summarize(spec: PolicySpec, config: ACTConfig, weights: Path) -> list[str]:
    """Lines describing an ACT policy's interface, architecture and weights file."""
    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras) or "none"
    lines = [f"cameras ({len(spec.cameras)}): {cameras}"]
    if config.n_cameras:
        height, width = config.backbone_input_size
        rows, cols = feature_map_size(height, width, config.replace_final_stride_with_dilation)
        dilated = ", layer4 dilated" if config.replace_final_stride_with_dilation else ""
        lines.append(
            f"backbone: {config.vision_backbone}{dilated}, frames fed at {height}x{width}, "
            f"feature map {rows}x{cols} ({rows * cols * config.n_cameras} image tokens)"
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
    if config.n_action_steps is not None or config.temporal_ensemble_coeff is not None:
        lines.append(
            f"execution hints: n_action_steps {config.n_action_steps}, temporal_ensemble_coeff "
            f"{config.temporal_ensemble_coeff}"
        )
    with torch.device("meta"):
        module = ACT(config)
    n_params = sum(p.numel() for p in module.parameters())
    n_serving = n_params - sum(
        p.numel() for name, p in module.named_parameters() if name.startswith("vae_encoder")
    )
    lines.append(f"parameters: {n_params:,} ({n_serving:,} used when serving)")
    return lines + describe_weights(weights)


def summarize_flow(spec: PolicySpec, config: FlowConfig, weights: Path) -> list[str]:
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
    return lines + describe_weights(weights)


def describe_weights(weights: Path) -> list[str]:
    """One line about the safetensors file: size and tensor count, or why it is unreadable."""
    lines: list[str] = []
    if weights.is_file():
        try:
            with safe_open(str(weights), framework="pt") as handle:
                count = len(list(handle.keys()))
            size_mb = weights.stat().st_size / 1e6
            lines.append(f"weights: {weights.name}, {size_mb:.1f} MB, {count} tensors")
        except Exception as exc:  # describe a bad header rather than fail
            lines.append(f"weights: {weights.name} is unreadable ({exc})")
    else:
        lines.append(f"weights: {weights.name} is missing")
    return lines
