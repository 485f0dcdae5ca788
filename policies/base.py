"""What a policy is, to the rest of Tempo.

A `Policy` turns one robot's observation and context into an action chunk: `chunk_size` future
joint targets, the first for the control step the observation belongs to. It is a pure function of
(observation, context): what it must remember about a robot (state history, previous plan,
inference delay, its own memory such as a planner's mean) lives in that robot's session and
travels in the `RobotContext`. The daemon never looks inside; accelerating, profiling or fault
injection are wrappers that are themselves a `Policy`.

This module imports numpy and pydantic only, so specs can be checked without torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class CameraSpec(BaseModel):
    """One camera: frames arrive as uint8 arrays of shape (height, width, 3)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    height: int = Field(gt=0, le=4096)
    width: int = Field(gt=0, le=4096)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, 3)


class Execution(BaseModel):
    """How a policy's chunks were executed when it was trained or evaluated: what its
    checkpoint says, which the daemon follows unless its `execution:` config overrides it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query_period: int = Field(ge=1, le=10_000, description="Control steps between inferences.")
    ensemble: Literal["temporal", "newest"] = Field(
        description="temporal: weighted mean of every chunk's prediction for a step (ACT's "
        "temporal ensembling); newest: play the newest chunk as it is."
    )
    temporal_k: float | None = Field(
        default=None, ge=-10, le=10, description="Ensembling weight exp(-k*i) (temporal only)."
    )
    source: str = Field(
        default="", max_length=4000, description="Where these settings come from, in words."
    )

    @model_validator(mode="after")
    def _k_for_temporal(self) -> Execution:
        if self.ensemble == "temporal" and self.temporal_k is None:
            raise ValueError("temporal ensembling needs temporal_k")
        return self


class PromptSpec(BaseModel):
    """A policy that reads a text prompt (a vision-language-action model): its SentencePiece
    tokenizer and how a robot's task becomes token ids. The control process tokenizes a task
    when it changes (hello, an episode start); the token ids travel with each observation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokenizer: str = Field(
        min_length=1,
        max_length=4096,
        description="Absolute path of the SentencePiece model file (a policy family sets it "
        "from its checkpoint directory); the control process reads it.",
    )
    max_length: int = Field(ge=1, le=4096, description="Token ids per prompt, padded right.")
    vocab_size: int = Field(
        ge=1, le=1_000_000, description="The model's vocabulary: the tokenizer must have as many."
    )
    template: Literal["pi0", "pi05", "smolvla"] = Field(
        default="pi0",
        description='pi0: BOS, the task, then "\\n"; pi05: BOS, "Task: {task}, State:" (the '
        "inference process appends the state and the action prefix); smolvla: the task ending "
        'in "\\n" through a Hugging Face tokenizer.json (policies.smolvla.tokenizer).',
    )
    default_task: str | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="The task of a robot that names none; None: such a robot is refused.",
    )


# The largest finite float16. The half-precision tiers cannot represent a normalized input past
# it, so it bounds what a robot may send (PolicySpec.state_range) and what teleop may command.
HALF_MAX = 65504.0


class PolicySpec(BaseModel):
    """The interface a policy was trained for; a driver must match it to be served."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cameras: tuple[CameraSpec, ...] = Field(
        description="Cameras in the order the model stacks them."
    )
    state_size: int = Field(ge=1, le=1024, description="Length of the joint-state vector.")
    joint_names: tuple[str, ...] = Field(
        min_length=1, description="Names of the commanded joints, one per action element."
    )
    chunk_size: int = Field(ge=1, le=10_000, description="Actions predicted per inference.")
    state_history: int = Field(
        default=1, ge=1, le=64, description="How many past state vectors the policy reads."
    )
    frame_history: int = Field(
        default=1,
        ge=1,
        le=64,
        description="How many observation steps of camera frames the policy reads, this one "
        "last: the robot's session keeps the frames of the earlier ones (Diffusion Policy's "
        "n_obs_steps).",
    )
    execution: Execution | None = Field(
        default=None,
        description="How the policy's chunks are meant to be executed (from its checkpoint); "
        "None: the daemon's inference config alone decides.",
    )
    state_bounds: tuple[tuple[float, float], ...] | None = Field(
        default=None,
        description="Per state value, the [low, high] range in robot units that the model "
        "represents after its own normalization (`with_state_bounds` in policies.tensor_policy "
        "reads it from the module). None: +-HALF_MAX, for a model that does not normalize.",
    )
    prompt: PromptSpec | None = Field(
        default=None,
        description="The text prompt the policy reads and its tokenizer; None: it reads none.",
    )

    @model_validator(mode="after")
    def _names_unique(self) -> PolicySpec:
        if len(set(self.joint_names)) != len(self.joint_names):
            raise ValueError("joint_names must be unique")
        names = [c.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise ValueError("camera names must be unique")
        if self.execution is not None and self.execution.query_period > self.chunk_size:
            raise ValueError(
                f"execution.query_period ({self.execution.query_period}) cannot exceed "
                f"chunk_size ({self.chunk_size}): steps between chunks would have no action"
            )
        if self.state_bounds is not None:
            if len(self.state_bounds) != self.state_size:
                raise ValueError("state_bounds needs one [low, high] pair per state value")
            for low, high in self.state_bounds:
                if not (np.isfinite(low) and np.isfinite(high) and low < high):
                    raise ValueError("each state_bounds pair must be finite with low < high")
        return self

    def state_range(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high), float32 arrays of state_size: the state values the model represents."""
        if self.state_bounds is None:
            high = np.full(self.state_size, HALF_MAX, dtype=np.float32)
            return -high, high
        bounds = np.asarray(self.state_bounds, dtype=np.float64)
        limit = float(np.finfo(np.float32).max)
        clipped = np.clip(bounds, -limit, limit).astype(np.float32)
        return clipped[:, 0].copy(), clipped[:, 1].copy()

    @property
    def action_dim(self) -> int:
        return len(self.joint_names)

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)


@dataclass(frozen=True, eq=False)  # arrays inside: compare fields, not objects
class Plan:
    """A robot's previous plan: the actions it has not executed yet, the first for `start_step`."""

    start_step: int
    actions: np.ndarray  # (n, action_dim) float32, n >= 1


@dataclass(frozen=True, eq=False)
class PromptTokens:
    """A robot's prompt as the policy reads it, padded right to the spec's prompt.max_length."""

    ids: np.ndarray  # (max_length,) int64, 0 past the prompt
    mask: np.ndarray  # (max_length,) bool, True for the prompt's tokens

    def __iter__(self) -> Iterator[np.ndarray]:
        """ids, mask = tokens"""
        return iter((self.ids, self.mask))

    @property
    def length(self) -> int:
        """How many token ids the prompt holds (the rest is padding)."""
        return int(np.count_nonzero(self.mask))


@dataclass(frozen=True, eq=False)
class RobotContext:
    """Everything a policy may need to remember about one robot. The robot's session owns it
    and passes it in with each observation, so a policy keeps no per-robot state and several
    robots can share one model."""

    step: int  # the control step the observation belongs to (row 0 of the chunk)
    episode_start: bool  # no chunk of this episode has come back yet: no plan, no memory
    state_history: np.ndarray  # (spec.state_history, spec.state_size) float32, oldest first
    previous_plan: Plan | None = None  # for real-time chunking and a planner's warm start
    inference_delay: int = 0  # recent observation-to-chunk delay, in control steps
    memory: Mapping[str, np.ndarray] = field(default_factory=dict)  # the policy's own; read-only
    prompt: PromptTokens | None = None  # the robot's task, tokenized (spec.prompt); else None
    # With spec.frame_history > 1: camera -> uint8 (frame_history - 1, H, W, 3), the frames of
    # the robot's previous observations, oldest first (at an episode start, copies of the
    # first). None outside a session (tools, benchmarks): the policy repeats this one's.
    past_frames: Mapping[str, np.ndarray] | None = None

    @property
    def state(self) -> np.ndarray:
        """This observation's state vector (the newest row of the history)."""
        return self.state_history[-1]


@dataclass(frozen=True, eq=False)
class Prediction:
    """A policy's answer: the chunk, and optionally what it wants back in this robot's
    `RobotContext.memory` next time (a planner's new mean); None keeps the memory as it is."""

    actions: np.ndarray  # (chunk_size, action_dim) float32, in the robot's units
    memory: Mapping[str, np.ndarray] | None = None


@runtime_checkable
class Policy(Protocol):
    """The one interface the daemon serves: a pure function of (observation, context)."""

    @property
    def spec(self) -> PolicySpec: ...

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        """Predict an action chunk for one robot.

        images: camera name -> uint8 array (height, width, 3), for every camera in `spec`.
        context: that robot's state history, previous plan, delay and memory (see RobotContext).
        Returns the chunk, float32 (chunk_size, action_dim) in the robot's units (unnormalized),
        and optionally the robot's new memory. Must not keep anything about the robot itself.
        """
        ...


def first_context(spec: PolicySpec, state: np.ndarray, step: int = 0) -> RobotContext:
    """The context of a robot's first observation: its state fills the whole history."""
    history = np.empty((spec.state_history, spec.state_size), dtype=np.float32)
    history[:] = np.asarray(state, dtype=np.float32)
    return RobotContext(step=step, episode_start=True, state_history=history)


def window_context(state_history: np.ndarray, step: int = 0) -> RobotContext:
    """A context that is just a state window (state_history, state_size): for tools and
    benchmarks that feed recorded or random windows, outside any robot's session."""
    return RobotContext(step=step, episode_start=True, state_history=state_history)
