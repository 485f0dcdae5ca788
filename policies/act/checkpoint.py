"""How ACT policies are stored in Tempo's checkpoint format (policies.checkpoints.tempo_format)
and read back: the act family's checkpoint part (`CHECKPOINT`, see policies.registry). ACT is
also the family of LeRobot ACT directories (policies.act.lerobot) and of quantized checkpoints
(a variant, policies.quant.checkpoint).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from policies.act.backbone import feature_map_size
from policies.act.config import ACTConfig
from policies.act.lerobot import LeRobotACT, read_lerobot_act
from policies.act.model import ACT
from policies.base import PolicySpec
from policies.checkpoints.execution import describe as describe_execution
from policies.checkpoints.execution import lerobot_execution
from policies.checkpoints.tempo_format import interface_problems
from policies.registry import CheckpointFamily


def act_spec_problems(spec: PolicySpec, config: ACTConfig) -> list[str]:
    """Where the spec and the ACT config disagree (ACT's cameras may differ in shape)."""
    return interface_problems(spec, config, config.frame_sizes)


def upgrade_act_spec(spec: PolicySpec, config: ACTConfig, where: str) -> PolicySpec:
    """A checkpoint written before the spec recorded its execution: the model config's LeRobot
    values (n_action_steps, temporal_ensemble_coeff) say it."""
    if spec.execution is not None or (
        config.n_action_steps is None and config.temporal_ensemble_coeff is None
    ):
        return spec
    execution = lerobot_execution(
        config.n_action_steps, config.temporal_ensemble_coeff, f"{where} model"
    )
    return spec.model_copy(update={"execution": execution})


def _read_lerobot(directory: Path, joint_names: Sequence[str] | None) -> LeRobotACT:
    return read_lerobot_act(directory, joint_names=joint_names)


def describe_act(spec: PolicySpec, config: ACTConfig) -> list[str]:
    """Lines describing an ACT policy's interface and architecture."""
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
    # No parameter count from a model built here: building one (even on the meta device) took
    # seconds; the weights line counts what the file holds, from its header.
    return lines


CHECKPOINT = CheckpointFamily(
    config_model=ACTConfig,
    module_type=ACT,
    spec_problems=act_spec_problems,
    describe=describe_act,
    upgrade_spec=upgrade_act_spec,
    lerobot_type="act",
    read_lerobot=_read_lerobot,
)
