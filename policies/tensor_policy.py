"""A policy whose whole step is one torch module: the form the runner can accelerate.

The module's contract (every policy family in `policies/` follows it):

    forward(images, state) -> actions
        images:  uint8   (batch, n_cameras, height, width, 3), cameras in `spec.cameras` order
        state:   float32 (batch, state_history, state_size), oldest first
        actions: float32 (batch, chunk_size, action_dim), in the robot's units

Everything between raw inputs and robot units (uint8 -> float, normalization, unnormalization)
happens inside `forward`, with constants held as registered buffers, so that compiling and CUDA
graph capture cover the whole step. The leading batch dimension is there for several robots at
once: a module keeps nothing between calls, so robot i's row depends on robot i's inputs only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from policies.base import PolicySpec, Prediction, RobotContext


@dataclass(frozen=True, eq=False)
class ReferenceChunks:
    """Chunks another model produced on given observations, which every serving tier must
    reproduce within the runner's `reference_parity_rtol` at start-up: a quantized policy
    carries its FP32 unquantized model's."""

    images: np.ndarray  # uint8 (n, n_cameras, height, width, 3), cameras in spec order
    state: np.ndarray  # float32 (n, state_history, state_size)
    chunks: np.ndarray  # float32 (n, chunk_size, action_dim)
    source: str = "the FP32 unquantized model"


@dataclass
class TensorPolicy:
    """A spec and the module that implements it (and, optionally, reference chunks)."""

    spec: PolicySpec
    module: nn.Module
    reference: ReferenceChunks | None = None


def check_stackable(spec: PolicySpec) -> tuple[int, int]:
    """Cameras go through the model as one batch, so they must share a frame shape."""
    shapes = {(c.height, c.width) for c in spec.cameras}
    if len(shapes) > 1:
        raise ValueError(
            "all cameras must have the same frame shape to be batched, got "
            + ", ".join(f"{c.name}={c.height}x{c.width}" for c in spec.cameras)
        )
    return shapes.pop() if shapes else (1, 1)


def example_inputs(
    spec: PolicySpec, batch: int = 1, device: str | torch.device = "cpu", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs shaped for `spec` (for warm-up, parity checks and tests)."""
    height, width = check_stackable(spec)
    gen = torch.Generator().manual_seed(seed)
    images = torch.randint(
        0, 256, (batch, len(spec.cameras), height, width, 3), dtype=torch.uint8, generator=gen
    )
    state = torch.randn(batch, spec.state_history, spec.state_size, generator=gen)
    return images.to(device), state.to(device)


class EagerPolicy:
    """Runs a TensorPolicy eagerly in FP32 on one device: the reference every faster path is
    checked against, and the plain way to serve a policy when nothing else is asked for."""

    def __init__(self, policy: TensorPolicy, device: str | torch.device = "cpu") -> None:
        self._spec = policy.spec
        self._device = torch.device(device)
        self._module = policy.module.to(self._device).eval()
        check_stackable(policy.spec)

    @property
    def spec(self) -> PolicySpec:
        return self._spec

    @torch.inference_mode()
    def predict_chunk(self, images: Mapping[str, np.ndarray], state: np.ndarray) -> np.ndarray:
        """The raw step: frames and a (state_history, state_size) window -> the chunk."""
        if self._spec.cameras:
            stacked = np.stack([images[c.name] for c in self._spec.cameras])
        else:
            stacked = np.zeros((0, 1, 1, 3), dtype=np.uint8)
        image_t = torch.from_numpy(stacked).unsqueeze(0).to(self._device)
        state_t = torch.from_numpy(np.ascontiguousarray(state, dtype=np.float32))
        state_t = state_t.reshape(1, self._spec.state_history, self._spec.state_size).to(
            self._device
        )
        actions = self._module(image_t, state_t)[0]
        return actions.float().cpu().numpy()

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        """The Policy contract: the module reads this robot's state history."""
        return Prediction(self.predict_chunk(images, context.state_history))
