"""The models rtc_smoothness.py (beside it) drives, one per family, each trained here for a few
hundred steps on the same synthetic task with the same flow-matching loop.

    flow   the demo flow policy (policies.demo), dim_model 32, one 32x32 camera; its image
           backbone stays frozen, the rest trains
    pi0    a tiny pi0 (policies.pi0.config.tiny_pi0_config's widths: 28x28 images of 4 tokens,
           towers 32-64 wide and 2 layers deep, a 5-token prompt) at the script's chunk and 10
           Euler steps (pi0's default); every sample sees the same black image and prompt, so
           vision and language stay at their random weights and their keys and values are
           encoded once; the action expert, the state projection and the action/time MLPs
           train (pi0's actions padded to max_action_dim with zeros, as LeRobot pads them)

Both normalize as the flow demo does (state std 0.5, action std 0.1 rad about the arm's home
pose), so their numbers are in the same radians. A model is driven through its family's RTC
sampler (policies.flow.rtc, policies.pi0.rtc) with inputs from its family's RTC codec, as the
daemon serves it.

The loss is flow matching in the sampler's convention (t = k / n on the Euler grid, noise at
t = 0): v(t A + (1 - t) e, t) regressed on A - e. pi0's own convention (time 1 - t, velocity
e - A) is the same loss; Pi0RealTimeChunking.velocity converts.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.base import CameraSpec, PolicySpec, PromptTokens, RobotContext
from policies.demo import make_demo_flow_policy
from policies.demo_arm import HOME_POSE
from policies.flow.codec import RTCCodec
from policies.flow.demo import FLOW_ACTION_STD
from policies.flow.guided_sampling import GuidedChunkSampler
from policies.flow.model import FlowMatchingPolicy
from policies.flow.rtc import RealTimeChunking
from policies.flow.settings import RTCConfig
from policies.inputs import InputCodec
from policies.pi0.backbone import PrefixCache
from policies.pi0.config import tiny_pi0_config
from policies.pi0.rtc import Pi0RealTimeChunking
from policies.pi0.rtc_codec import Pi0RTCCodec
from policies.pi0.step import Pi0Step, Pi0StepConfig

FAMILIES = ("flow", "pi0")
# Default training steps: 75-105 s of one core each on the 2-core machine of docs/rtc-smoothness.md
# (pi0's step is the cheaper: its prefix is encoded once; its loss, 0.17 at 200 steps, is 0.105
# at 3000).
TRAIN_STEPS = {"flow": 400, "pi0": 3000}
JOINTS = 2
AMPLITUDE = 1.0  # normalized units: the task's chunks are sinusoids of random phase
FLOW_IMAGE = 32
BATCH = 64  # training samples per step
PI0_STEPS = 10  # Euler steps, pi0's default (LeRobot's num_inference_steps)
STATE_STD = 0.5  # as the flow demo's
PROMPT_IDS = (5, 6, 7)  # the tiny pi0's prompt: any ids below its vocabulary


@dataclass
class SmoothnessModel:
    """A trained model as the simulation drives it: its RTC sampler in any mode, and that
    sampler's batched inputs for one robot's context."""

    family: str
    spec: PolicySpec
    module: nn.Module  # FlowMatchingPolicy or Pi0Step
    codec: InputCodec  # the family's RTC codec (noise seeded with the script's seed)
    frames: tuple[Tensor, ...]  # one robot's black frames, batched
    prompt: PromptTokens | None

    @property
    def rest(self) -> np.ndarray:
        """Robot units: where the robot starts, the centre of the action statistics."""
        module = self.module
        center = (
            module.action_norm.center
            if isinstance(module, Pi0Step)
            else module.get_buffer("action_norm.mean")
        )
        return center.detach().numpy().astype(np.float32).copy()

    def sampler(self, config: RTCConfig) -> GuidedChunkSampler:
        if isinstance(self.module, Pi0Step):
            return Pi0RealTimeChunking(self.module, config)
        if not isinstance(self.module, FlowMatchingPolicy):
            raise TypeError(f"no RTC sampler for {type(self.module).__name__}")
        return RealTimeChunking(self.module, config)

    def inputs(self, context: RobotContext) -> tuple[Tensor, ...]:
        """The sampler's inputs, made by the family's codec from `context` (and the prompt)."""
        context = dataclasses.replace(context, prompt=self.prompt)
        out = [np.zeros(i.shape, i.dtype) for i in self.codec.inputs]
        self.codec.encode(context, out)
        return (*self.frames, *(torch.from_numpy(a[None]) for a in out))

    def guidance(
        self, sampler: GuidedChunkSampler, inputs: tuple[Tensor, ...]
    ) -> tuple[Any, Tensor, Tensor, Tensor]:
        """What `sampler` (this model's) makes of its `inputs` before the Euler steps: the
        context, the normalized target, the mask and the noise."""
        if isinstance(sampler, Pi0RealTimeChunking):
            *frames, state, noise, prompt, prompt_mask, prefix, prefix_len, delay = inputs
            context = sampler.encode(frames, state, prompt, prompt_mask)
            target = sampler.guidance_target(prefix)
            return context, target, sampler.guidance_mask(prefix_len, delay), noise
        if not isinstance(sampler, RealTimeChunking):
            raise TypeError(f"no guidance inputs for {type(sampler).__name__}")
        image, state, noise, prefix, prefix_len, delay = inputs
        target, mask = sampler.guidance_targets(prefix, prefix_len, delay)
        return sampler.flow.encode(image, state), target, mask, noise


def make_model(family: str, chunk: int, train_steps: int, seed: int) -> SmoothnessModel:
    """The family's model, trained `train_steps` steps on the task (0: random weights)."""
    if family == "flow":
        return make_flow(chunk, train_steps, seed)
    if family == "pi0":
        return make_pi0(chunk, train_steps, seed)
    raise ValueError(f"unknown family {family!r}; use one of {', '.join(FAMILIES)}")


def task_chunks(state: Tensor, chunk: int, gen: torch.Generator) -> Tensor:
    """Normalized target chunks for normalized states (B, J): from the state, a half period of a
    sinusoid with a random phase per sample."""
    batch = state.shape[0]
    phase = torch.rand(batch, 1, 1, generator=gen) * 2 * math.pi
    i = torch.arange(chunk, dtype=torch.float32).view(1, -1, 1)
    offsets = torch.arange(JOINTS, dtype=torch.float32).view(1, 1, -1)
    wave = torch.sin(math.pi * i / chunk + phase + offsets) - torch.sin(phase + offsets)
    return state.unsqueeze(1) + AMPLITUDE * wave


def train_flow_matching(
    velocity: Callable[[Tensor, Tensor, Any], Tensor],
    encode: Callable[[Tensor], Any],
    parameters: list[nn.Parameter],
    shape: tuple[int, int, int],
    steps: int,
    seed: int,
    lr: float = 2e-3,
) -> None:
    """Flow matching on the task: `velocity(t A + (1 - t) e, step, encode(state))` regressed on
    A - e, t = step / n on the Euler grid. shape: (n Euler steps, chunk, action width); the
    actions past the task's joints are trained toward 0 (pi0's padding)."""
    gen = torch.Generator().manual_seed(seed)
    n, chunk, width = shape
    optimizer = torch.optim.Adam(parameters, lr=lr)
    started = time.perf_counter()
    loss = torch.zeros(())
    for _ in range(steps):
        state_n = torch.rand(BATCH, JOINTS, generator=gen) * 2 - 1
        target = F.pad(task_chunks(state_n, chunk, gen), (0, width - JOINTS))
        noise = torch.randn(target.shape, generator=gen)
        step = torch.randint(0, n, (BATCH,), generator=gen)
        t = (step.float() / n).view(-1, 1, 1)
        v = velocity(t * target + (1 - t) * noise, step, encode(state_n))
        loss = ((v - (target - noise)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"trained {steps} steps in {time.perf_counter() - started:.0f} s, loss {loss.item():.3f}")


def make_flow(chunk: int, train_steps: int, seed: int) -> SmoothnessModel:
    policy = make_demo_flow_policy(
        cameras=(("front", FLOW_IMAGE, FLOW_IMAGE),),
        joint_names=tuple(f"j{i}" for i in range(JOINTS)),
        state_size=JOINTS,
        chunk_size=chunk,
        dim_model=32,
        seed=seed,
    )
    module = policy.module
    if not isinstance(module, FlowMatchingPolicy):
        raise TypeError("the demo flow policy's module is a FlowMatchingPolicy")
    frames = (torch.zeros(1, 1, FLOW_IMAGE, FLOW_IMAGE, 3, dtype=torch.uint8),)
    if train_steps:
        for p in module.backbone.parameters():
            p.requires_grad_(False)
        images = frames[0].expand(BATCH, -1, -1, -1, -1)
        module.train()
        train_flow_matching(
            module.velocity,
            lambda state_n: module.encode(images, module.state_norm.unnormalize(state_n)[:, None]),
            [p for p in module.parameters() if p.requires_grad],
            (module.config.n_steps, chunk, JOINTS),
            train_steps,
            seed,
        )
    module.eval()
    return SmoothnessModel("flow", policy.spec, module, RTCCodec(policy.spec, seed), frames, None)


def make_pi0(chunk: int, train_steps: int, seed: int) -> SmoothnessModel:
    network = tiny_pi0_config(chunk_size=chunk, n_action_steps=chunk, num_inference_steps=PI0_STEPS)
    image = network.vision.image_size
    torch.manual_seed(seed)
    step = Pi0Step(
        Pi0StepConfig(
            network=network,
            state_size=JOINTS,
            action_size=JOINTS,
            camera_sizes=((image, image),),
        )
    )
    home = torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(JOINTS)])
    with torch.no_grad():
        step.state_norm.center.copy_(home)
        step.state_norm.scale.fill_(STATE_STD)
        step.action_norm.center.copy_(home)
        step.action_norm.scale.fill_(FLOW_ACTION_STD)
    spec = PolicySpec(
        cameras=(CameraSpec(name="front", height=image, width=image),),
        state_size=JOINTS,
        joint_names=tuple(f"j{i}" for i in range(JOINTS)),
        chunk_size=chunk,
    )
    ids = np.zeros(network.tokenizer_max_length, np.int64)
    ids[: len(PROMPT_IDS)] = PROMPT_IDS
    prompt = PromptTokens(ids, np.arange(len(ids)) < len(PROMPT_IDS))
    frames = (torch.zeros(1, 1, image, image, 3, dtype=torch.uint8),)
    model = SmoothnessModel("pi0", spec, step, Pi0RTCCodec(spec, step, seed), frames, prompt)
    if train_steps:
        train_pi0_expert(model, train_steps, seed)
    step.eval()
    return model


def train_pi0_expert(model: SmoothnessModel, steps: int, seed: int) -> None:
    """The suffix side of the tiny pi0 (see the module doc) trained on the task, through the RTC
    sampler's own velocity (mode off)."""
    step = model.module
    if not isinstance(step, Pi0Step):
        raise TypeError("train_pi0_expert needs a pi0 model")
    sampler = Pi0RealTimeChunking(step, RTCConfig(mode="off"))  # freezes the whole step
    network = step.network
    trained = (
        network.paligemma_with_expert.gemma_expert.model,  # not its (unused) LM head
        network.action_in_proj,
        network.action_out_proj,
        network.state_proj,
        network.action_time_mlp_in,
        network.action_time_mlp_out,
    )
    parameters = [p for module in trained for p in module.parameters()]
    for p in parameters:
        p.requires_grad_(True)
    context = RobotContext(
        step=0, episode_start=True, state_history=np.zeros((1, JOINTS), np.float32)
    )
    inputs = model.inputs(context)
    with torch.no_grad():
        frames, state, _, prompt, prompt_mask = inputs[:5]
        cache, _ = sampler.encode((frames,), state, prompt, prompt_mask)
    cache = PrefixCache(
        cache.keys.expand(-1, BATCH, -1, -1, -1),
        cache.values.expand(-1, BATCH, -1, -1, -1),
        cache.pad.expand(BATCH, -1),
    )
    state_width = step.config.network.max_state_dim
    step.train()
    train_flow_matching(
        sampler.velocity,
        lambda state_n: (cache, F.pad(state_n, (0, state_width - JOINTS))),
        parameters,
        (sampler.n_steps, step.config.network.chunk_size, step.config.network.max_action_dim),
        steps,
        seed,
    )
    step.requires_grad_(False)
