"""How flow-matching policies are stored in Tempo's checkpoint format
(policies.checkpoints.tempo_format) and read back: the flow family's checkpoint part
(`CHECKPOINT`, see policies.registry).
"""

from __future__ import annotations

from torch import nn

from policies.act.backbone import feature_map_size
from policies.base import PolicySpec
from policies.checkpoints.tempo_format import interface_problems
from policies.flow.codec import FlowCodec
from policies.flow.config import FlowConfig
from policies.flow.model import FlowMatchingPolicy
from policies.registry import CheckpointFamily
from policies.tensor_policy import TensorPolicy


def flow_spec_problems(spec: PolicySpec, config: FlowConfig) -> list[str]:
    """Where the spec and the flow config disagree (every camera has one frame shape)."""
    sizes = ((config.image_height, config.image_width),) * config.n_cameras
    return interface_problems(spec, config, sizes)


def flow_policy(module: nn.Module, spec: PolicySpec) -> TensorPolicy:
    """A flow module served with its codec (frames, state and the noise it integrates)."""
    return TensorPolicy(spec=spec, module=module, codec=FlowCodec(spec))


def describe_flow(spec: PolicySpec, config: FlowConfig) -> list[str]:
    """Lines describing a flow-matching policy's interface and architecture."""
    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras)
    rows, cols = feature_map_size(config.image_height, config.image_width)
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
    ]  # the weights line counts the values, from the file's header (no model built here)
    return lines


CHECKPOINT = CheckpointFamily(
    config_model=FlowConfig,
    module_type=FlowMatchingPolicy,
    spec_problems=flow_spec_problems,
    describe=describe_flow,
    to_policy=flow_policy,
)
