"""The `infer` message: one robot's observation and context, control process -> inference
process (the other messages between them: `process_messages`, which exports this one too).

Several robots' requests sent as one batch travel as consecutive `infer` messages, each saying
how many of its batch follow it (`batch_left`): the inference process waits for all of them
before it runs the step (controller.inference.process_server)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.process_protocol.message_codec import (
    Message,
    MessageError,
    MessageFields,
    pack_array,
    pack_arrays,
)
from policies.base import Plan, PromptTokens


@dataclass(frozen=True, eq=False)
class Infer(Message):
    """One observation and its robot's context. The frames (and the state history) lie in slot
    `slot` of the observation slots at `generation`; with `ring`, the frames lie in that slot of
    the driver's frame ring `ring` instead and the state history travels here (`state`).
    `prompt`: the robot's task as token ids and mask (a policy that reads a prompt).
    `past_frames`: the frames of the robot's previous observations, camera -> uint8 (k, H, W,
    3), oldest first (a policy that reads several steps of frames, PolicySpec.frame_history)."""

    KIND = "infer"
    id: int
    slot: int
    generation: int
    step: int
    episode_start: bool
    delay: int
    plan: Plan | None = None
    memory: dict[str, np.ndarray] | None = None
    ring: int | None = None
    state: np.ndarray | None = None
    prompt: PromptTokens | None = None
    batch_left: int = 0  # requests of the same batch that follow this one
    past_frames: dict[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        if (self.ring is None) != (self.state is None):
            raise MessageError("an 'infer' message names a driver's ring and its state, or neither")
        prompt = self.prompt
        if prompt is not None and not (
            prompt.ids.dtype == np.int64
            and prompt.mask.dtype == np.bool_
            and prompt.ids.ndim == 1
            and prompt.ids.shape == prompt.mask.shape
        ):
            raise MessageError(
                "an 'infer' message's prompt must be int64 ids and a bool mask of one length"
            )
        frames = self.past_frames
        if frames is not None and not all(
            f.dtype == np.uint8 and f.ndim == 4 and f.shape[-1] == 3 for f in frames.values()
        ):
            raise MessageError(
                "an 'infer' message's past frames must be uint8 arrays (steps, height, width, 3)"
            )
        if not 0 <= self.batch_left < 64:
            raise MessageError("an 'infer' message's batch_left must be between 0 and 63")

    def fields(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "id": self.id,
            "slot": self.slot,
            "generation": self.generation,
            "step": self.step,
            "episode_start": self.episode_start,
            "delay": self.delay,
            "plan_start": plan.start_step if plan is not None else None,
            "plan": pack_array(plan.actions) if plan is not None else None,
            "memory": pack_arrays(self.memory),
            "ring": self.ring,
            "state": pack_array(self.state) if self.state is not None else None,
            "prompt": pack_array(self.prompt.ids) if self.prompt is not None else None,
            "prompt_mask": pack_array(self.prompt.mask) if self.prompt is not None else None,
            "batch_left": self.batch_left,
            "past_frames": pack_arrays(self.past_frames),
        }

    @classmethod
    def read(cls, fields: MessageFields) -> Infer:
        request_id, slot, generation = (fields.integer(n) for n in ("id", "slot", "generation"))
        step, episode_start = fields.integer("step"), fields.boolean("episode_start")
        delay = fields.integer("delay")
        plan_start, actions = fields.optional_integer("plan_start"), fields.optional_array("plan")
        plan = None
        if plan_start is not None and actions is not None:
            plan = Plan(plan_start, actions)
        elif plan_start is not None or actions is not None:
            raise MessageError("an 'infer' message has a plan and its start step, or neither")
        memory = fields.arrays("memory")
        ring, state = fields.optional_integer("ring"), fields.optional_array("state")
        ids, mask = fields.optional_array("prompt"), fields.optional_array("prompt_mask")
        if (ids is None) != (mask is None):
            raise MessageError("an 'infer' message has a prompt and its mask, or neither")
        prompt = PromptTokens(ids, mask) if ids is not None and mask is not None else None
        context = (step, episode_start, delay, plan, memory)
        batch_left = fields.optional_integer("batch_left") or 0
        past_frames = fields.arrays("past_frames")
        return cls(
            request_id, slot, generation, *context, ring, state, prompt, batch_left, past_frames
        )
