"""What a policy module's `forward` takes, and how one robot's observation becomes those tensors.

    module(*frames, *codec_inputs) -> actions | (actions, *extras)

frames: one uint8 tensor (batch, n, height, width, 3) per distinct camera shape, groups in the
    order their first camera appears in `spec.cameras`, cameras within a group in spec order
    (`frame_groups`). All cameras of one shape, the common case, is a single tensor; a policy
    without cameras gets one empty tensor (batch, 0, 1, 1, 3), so its forward keeps one shape.
codec_inputs: what the policy's `InputCodec` builds from the robot's `RobotContext`. The default
    codec gives the state history, float32 (batch, state_history, state_size); a policy that
    needs more (a previous plan, an inference delay, a planner's warm start) declares its own.
extras: optional further outputs, float32, named by `codec.outputs`; they come back to the
    robot's session as `Prediction.memory` (a planner's new mean).

The runner allocates one static tensor per input from these declarations (shapes never change,
so a CUDA graph can be captured over them) and fills them from each robot's observation, so a
policy's per-robot state travels through these inputs and outputs, never inside the module.
Several robots are served in one step as rows of a batch: the codec writes each robot's row on
its own (`encode` sees one row), and row b of every output belongs to the robot of row b.
This module imports numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from policies.base import PolicySpec, RobotContext

InputDtype = Literal["uint8", "float32", "int64"]


@dataclass(frozen=True)
class TensorInput:
    """One tensor argument of `forward`: its name, its shape without the batch dimension."""

    name: str
    shape: tuple[int, ...]
    dtype: InputDtype = "float32"


@dataclass(frozen=True)
class FrameGroup:
    """Cameras of one frame shape, batched as one tensor (n, height, width, 3)."""

    height: int
    width: int
    cameras: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.cameras), self.height, self.width, 3)


def frame_groups(spec: PolicySpec) -> tuple[FrameGroup, ...]:
    """The frame tensors of `spec`: one per distinct camera shape (see the module doc)."""
    order: list[tuple[int, int]] = []
    members: dict[tuple[int, int], list[str]] = {}
    for camera in spec.cameras:
        key = (camera.height, camera.width)
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(camera.name)
    if not order:
        return (FrameGroup(1, 1, ()),)
    return tuple(FrameGroup(h, w, tuple(members[(h, w)])) for h, w in order)


class InputCodec:
    """The inputs after the frames, built from one robot's context. This base class is the
    default: the state history. Subclass it for a policy that reads more of the context."""

    outputs: tuple[str, ...] = ()  # names of the module's extra outputs (-> Prediction.memory)
    # Why this policy cannot serve several robots in one step, in one sentence (a module that
    # keeps a robot's memory inside itself, say); None: it batches. `encode` writes one robot's
    # row, and the module must treat its batch rows independently.
    batch_refusal: str | None = None

    def __init__(self, spec: PolicySpec) -> None:
        self.spec = spec

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        return (TensorInput("state", (self.spec.state_history, self.spec.state_size)),)

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        """Write this robot's inputs into `out` (arrays shaped like `inputs`, no batch
        dimension). Raises ValueError naming what does not fit."""
        expected = (self.spec.state_history, self.spec.state_size)
        history = context.state_history
        if history.dtype != np.float32 or history.shape != expected:
            raise ValueError(
                f"state: expected float32 {expected}, got {history.dtype} {history.shape}"
            )
        np.copyto(out[0], history)

    def example(self, seed: int) -> RobotContext:
        """A random context for warm-up and start-up parity checks (a different one per seed)."""
        rng = np.random.default_rng(seed)
        history = rng.standard_normal((self.spec.state_history, self.spec.state_size))
        return RobotContext(step=0, episode_start=True, state_history=history.astype(np.float32))


def example_frames(spec: PolicySpec, seed: int) -> dict[str, np.ndarray]:
    """Random uint8 frames for every camera of `spec`."""
    rng = np.random.default_rng(seed)
    return {c.name: rng.integers(0, 256, c.shape, dtype=np.uint8) for c in spec.cameras}


def check_frames(spec: PolicySpec, images: Mapping[str, np.ndarray]) -> None:
    """Refuse frames that do not fit the spec, naming the camera and what is wrong."""
    for camera in spec.cameras:
        frame = images.get(camera.name)
        if frame is None:
            raise ValueError(f"observation has no frame for camera {camera.name!r}")
        if frame.dtype != np.uint8 or frame.shape != camera.shape:
            raise ValueError(
                f"camera {camera.name!r}: expected uint8 {camera.shape}, "
                f"got {frame.dtype} {frame.shape}"
            )


def stack_frames(spec: PolicySpec, images: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The frame tensors of one observation as numpy arrays (no batch dimension)."""
    check_frames(spec, images)
    stacked = []
    for group in frame_groups(spec):
        if group.cameras:
            stacked.append(np.stack([images[name] for name in group.cameras]))
        else:
            stacked.append(np.zeros((0, 1, 1, 3), dtype=np.uint8))
    return stacked
