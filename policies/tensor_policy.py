"""A policy whose whole step is one torch module: the form the runner can accelerate.

The module's contract (every policy family in `policies/` follows it; `policies.inputs` has the
general form, with several camera shapes and inputs beyond the state):

    forward(images, state) -> actions
        images:  uint8   (batch, n_cameras, height, width, 3), cameras in `spec.cameras` order
        state:   float32 (batch, state_history, state_size), oldest first
        actions: float32 (batch, chunk_size, action_dim), in the robot's units

Everything between raw inputs and robot units (uint8 -> float, normalization, unnormalization)
happens inside `forward`, with constants held as registered buffers, so that compiling and CUDA
graph capture cover the whole step. The leading batch dimension is there for several robots at
once: a module keeps nothing between calls, so robot i's row depends on robot i's inputs only.
A policy that reads more of the robot's context than its state history (a previous plan, an
inference delay, a planner's warm start) declares an `InputCodec` that builds those inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch
from torch import nn

from policies.base import (
    HALF_MAX,
    PolicySpec,
    Prediction,
    PromptTokens,
    RobotContext,
    window_context,
)
from policies.inputs import InputCodec, frame_groups, stack_frames


@dataclass(frozen=True, eq=False)
class ReferenceChunks:
    """Chunks another model produced on given observations, which every serving tier must
    reproduce within the runner's `reference_parity_rtol` at start-up: a quantized policy
    carries its FP32 unquantized model's."""

    images: np.ndarray  # uint8 (n, n_cameras, height, width, 3), cameras in spec order
    state: np.ndarray  # float32 (n, state_history, state_size)
    chunks: np.ndarray  # float32 (n, chunk_size, action_dim)
    source: str = "the FP32 unquantized model"
    prompts: tuple[PromptTokens, ...] | None = None  # the task of each, for a prompted policy


class ParityMeasure(Protocol):
    """How far a tier's outputs are from the eager FP32 reference's on one start-up example,
    for a policy whose outputs are not comparable elementwise (a planner in reduced precision
    chooses among near-equal plans): replaces the runner's relative error and parity_rtol."""

    name: str  # what the error is, for logs and refusals ("value regret")
    tolerance: float  # the largest error a tier may show

    def error(
        self, context: RobotContext, outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]
    ) -> float:
        """The tier's error on the example with this context (outputs: the chunk, then the
        codec's extras, as the reference's)."""
        ...


@dataclass
class TensorPolicy:
    """A spec, the module that implements it, and how a robot's context becomes the module's
    inputs after the frames (None: the state history alone, `InputCodec`'s default); optionally
    reference chunks every tier must reproduce (a quantized policy's FP32 model's)."""

    spec: PolicySpec
    module: nn.Module
    codec: InputCodec | None = None
    reference: ReferenceChunks | None = None
    # The start-up parity measure, when elementwise relative error within parity_rtol is not it.
    parity: ParityMeasure | None = None

    @property
    def inputs(self) -> InputCodec:
        return self.codec if self.codec is not None else InputCodec(self.spec)


def example_inputs(
    spec: PolicySpec, batch: int = 1, device: str | torch.device = "cpu", seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Random default-codec inputs shaped for `spec`: one uint8 frame tensor per camera shape
    (`frame_groups`), then the state history (for warm-up, parity checks and tests)."""
    gen = torch.Generator().manual_seed(seed)
    frames = [
        torch.randint(0, 256, (batch, *group.shape), dtype=torch.uint8, generator=gen)
        for group in frame_groups(spec)
    ]
    state = torch.randn(batch, spec.state_history, spec.state_size, generator=gen)
    return tuple(t.to(device) for t in (*frames, state))


class EagerPolicy:
    """Runs a TensorPolicy eagerly in FP32 on one device: the reference every faster path is
    checked against, and the plain way to serve a policy when nothing else is asked for."""

    def __init__(self, policy: TensorPolicy, device: str | torch.device = "cpu") -> None:
        self._spec = policy.spec
        self._codec = policy.inputs
        self._device = torch.device(device)
        self._module = policy.module.to(self._device).eval()

    @property
    def module(self) -> nn.Module:
        """The module it runs, on its device, in eval mode."""
        return self._module

    @property
    def spec(self) -> PolicySpec:
        return self._spec

    # no_grad, not inference_mode: a module may differentiate inside its forward (RTC's exact
    # guidance takes a VJP), which inference mode forbids or (torch before the fix of
    # pytorch#177318) silently zeroes.
    @torch.no_grad()
    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        """The Policy contract: frames and the codec's inputs in, the chunk (and memory) out."""
        codec = self._codec
        host = [np.empty(i.shape, dtype=i.dtype) for i in codec.inputs]
        codec.encode(context, host)
        arrays = stack_frames(self._spec, images) + host
        tensors = [torch.from_numpy(a).unsqueeze(0).to(self._device) for a in arrays]
        out = self._module(*tensors)
        outputs = out if isinstance(out, tuple) else (out,)
        actions = outputs[0][0].float().cpu().numpy()
        if not codec.outputs:
            return Prediction(actions)
        extras = zip(codec.outputs, outputs[1:], strict=True)
        memory = {name: out[0].float().cpu().numpy() for name, out in extras}
        return Prediction(actions, memory)

    def predict_chunk(self, images: Mapping[str, np.ndarray], state: np.ndarray) -> np.ndarray:
        """The raw step: frames and a (state_history, state_size) window -> the chunk."""
        return self.predict(images, window_context(state)).actions


def with_state_bounds(policy: TensorPolicy) -> TensorPolicy:
    """The policy with `spec.state_bounds` from its module, for a module that normalizes its
    state: `module.state_bounds(limit)` returns (low, high), each of shape (state_size,), the
    raw state values whose normalized value stays within +-limit. The limit is HALF_MAX, what the
    half-precision tiers represent; the daemon refuses an observation outside those bounds. A
    module without the method (no normalization) leaves the spec as it is (+-HALF_MAX raw)."""
    bounds = getattr(policy.module, "state_bounds", None)
    if not callable(bounds):
        return policy
    low, high = bounds(HALF_MAX)
    pairs = tuple(
        (float(lo), float(hi))
        for lo, hi in zip(low.detach().cpu().tolist(), high.detach().cpu().tolist(), strict=True)
    )
    return replace(policy, spec=policy.spec.model_copy(update={"state_bounds": pairs}))
