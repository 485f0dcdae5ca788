"""Flow-matching policies with random weights: the demo's (shaped for the simulated arm,
policies.demo_arm) and an ALOHA-shaped one for benchmarks.

The demo's statistics suit the simulated arm as the ACT demo's do; its velocity head is scaled so
that each Euler step moves an action by a bounded amount, which keeps every output within a few
FLOW_ACTION_STD of the home pose whatever the inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from policies.act.demo import aloha_spec
from policies.base import CameraSpec, PolicySpec
from policies.demo_arm import DEFAULT_JOINTS, HOME_POSE, IMAGENET_MEAN, IMAGENET_STD
from policies.flow.codec import FlowCodec
from policies.flow.config import FlowConfig
from policies.flow.model import FlowMatchingPolicy
from policies.tensor_policy import TensorPolicy

FLOW_ACTION_STD = 0.1  # rad per unit of normalized action (flow demo)
FLOW_VELOCITY_BOUND = 1.5  # flow demo: largest |velocity| per action entry, normalized


def make_demo_flow_policy(
    *,
    cameras: Sequence[tuple[str, int, int]] = (("front", 96, 128),),
    joint_names: Sequence[str] = DEFAULT_JOINTS,
    state_size: int = 6,
    chunk_size: int = 50,
    n_steps: int = 10,
    dim_model: int = 64,
    seed: int = 0,
) -> TensorPolicy:
    """The demo flow policy in memory (FP32, eval mode, CPU)."""
    shapes = {(height, width) for _, height, width in cameras}
    if len(shapes) != 1:
        raise ValueError(f"the demo needs cameras of one frame shape, got {sorted(shapes)}")
    height, width = shapes.pop()
    config = FlowConfig(
        n_cameras=len(cameras),
        image_height=height,
        image_width=width,
        state_dim=state_size,
        action_dim=len(joint_names),
        chunk_size=chunk_size,
        n_steps=n_steps,
        dim_model=dim_model,
        n_heads=4,
        dim_feedforward=4 * dim_model,
        n_context_layers=1,
        n_expert_layers=2,
    )
    spec = PolicySpec(
        cameras=tuple(CameraSpec(name=n, height=h, width=w) for n, h, w in cameras),
        state_size=state_size,
        joint_names=tuple(joint_names),
        chunk_size=chunk_size,
    )
    torch.manual_seed(seed)
    with torch.no_grad():
        module = FlowMatchingPolicy(config)
        n_joints = len(joint_names)
        module.image_norm.mean.copy_(torch.tensor(IMAGENET_MEAN).expand(len(cameras), 3))
        module.image_norm.std.copy_(torch.tensor(IMAGENET_STD).expand(len(cameras), 3))
        module.state_norm.mean.copy_(
            torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(state_size)])
        )
        module.state_norm.std.fill_(0.5)
        module.action_norm.mean.copy_(
            torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(n_joints)])
        )
        module.action_norm.std.fill_(FLOW_ACTION_STD)
        # The expert ends in a LayerNorm (unit weight, zero bias): outputs of norm sqrt(dim).
        head = module.velocity_head
        head.weight.mul_(
            FLOW_VELOCITY_BOUND / dim_model**0.5 / head.weight.norm(dim=1, keepdim=True)
        )
        head.bias.zero_()
    return TensorPolicy(spec=spec, module=module.eval(), codec=FlowCodec(spec))


def make_flow_aloha_policy(seed: int = 0) -> TensorPolicy:
    """A flow policy at ALOHA shapes for benchmarks: resnet18, 3 cameras 480x640, 14 joints,
    H = 50, 10 Euler steps, dim_model 512, 8 heads, feedforward 2048, 2 context and 6
    action-expert layers. Random weights."""
    config = FlowConfig(
        n_cameras=3,
        image_height=480,
        image_width=640,
        state_dim=14,
        action_dim=14,
        chunk_size=50,
        n_steps=10,
        dim_model=512,
        n_heads=8,
        dim_feedforward=2048,
        n_context_layers=2,
        n_expert_layers=6,
    )
    spec = aloha_spec(chunk_size=50)
    torch.manual_seed(seed)
    module = FlowMatchingPolicy(config).eval()
    return TensorPolicy(spec=spec, module=module, codec=FlowCodec(spec))
