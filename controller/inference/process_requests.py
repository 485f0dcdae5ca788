"""The inference process's requests: an `infer` message -> the observation and its robot's
context, and a batch of them (consecutive `infer` messages, each saying how many follow) run as
one step when the policy batches (`predict_batch`), else one by one.

    batch = rest_of_batch(first, next_message)          # the first and the ones that follow
    for message, outcome in serve_requests(runner, slots, rings, batch): ...  # in order

An outcome is the chunk and memory as they travel (float32), or the exception that request
raised (its reply says whose fault: process_server.reply_kind). A slot whose observation was
rewritten while it was read, or whose data no longer matches its checksum, fails that request
only, never the rest of its batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

from controller.inference.local_policy import LocalPolicy
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.infer_message import Infer
from controller.process_protocol.message_codec import (
    Message,
    MessageError,
    as_float32,
    float32_arrays,
)
from policies.base import Prediction, RobotContext

log = logging.getLogger(__name__)

BATCH_WAIT_S = 1.0  # the rest of a batch is written right after its first: past this, it is lost
Outcome = tuple[np.ndarray, dict[str, np.ndarray] | None] | Exception
Item = tuple[Mapping[str, np.ndarray], RobotContext]


class Rings(Protocol):
    def get(self, ring_id: int) -> FrameSlots: ...


class BatchPolicy(LocalPolicy, Protocol):
    def predict_batch(self, items: list[Item]) -> list[Prediction | Exception]: ...


def rest_of_batch(
    first: Infer, next_message: Callable[[float], Message | None]
) -> tuple[list[Infer], list[Message]]:
    """`first` and the `infer` messages of its batch that follow it (`next_message(timeout_s)`
    gives the next one, None when none came in time); other messages that arrive meanwhile
    (there should be none) are returned to be handled after the batch. A batch whose rest does
    not come within BATCH_WAIT_S is served as far as it came (logged)."""
    batch, others = [first], []
    deadline = time.monotonic() + BATCH_WAIT_S
    while batch[-1].batch_left > 0:
        left = deadline - time.monotonic()
        message = next_message(max(left, 0.0)) if left > 0 else None
        if message is None:
            log.warning("a batch of requests came incomplete (%d of %d); serving those",
                        len(batch), len(batch) + batch[-1].batch_left)  # fmt: skip
            break
        if isinstance(message, Infer):
            batch.append(message)
        else:
            others.append(message)
    return batch, others


def serve_requests(
    runner: LocalPolicy, slots: FrameSlots, rings: Rings, batch: list[Infer]
) -> list[tuple[Infer, Outcome]]:
    """Each request's outcome, in order: one step for the batch when the runner batches."""
    items: list[Item] = []
    sources: list[FrameSlots] = []
    outcomes: list[Outcome | None] = [None] * len(batch)
    for k, message in enumerate(batch):
        try:
            source, images, context = request_input(slots, rings, message)
        except Exception as exc:  # noqa: BLE001 - that request's failure alone
            outcomes[k] = exc
            continue
        items.append((images, context))
        sources.append(source)
    pending = [k for k, outcome in enumerate(outcomes) if outcome is None]
    predictions = _predict_all(runner, items)
    for k, source, prediction in zip(pending, sources, predictions, strict=True):
        if isinstance(prediction, Exception):
            outcomes[k] = prediction
            continue
        try:
            check_served(source, batch[k])
        except Exception as exc:  # noqa: BLE001 - a torn or foreign-written slot: this one
            outcomes[k] = exc
            continue
        outcomes[k] = (as_float32(prediction.actions), float32_arrays(prediction.memory))
    return [(m, o) for m, o in zip(batch, outcomes, strict=True) if o is not None]


def _predict_all(runner: LocalPolicy, items: list[Item]) -> list[Prediction | Exception]:
    if len(items) > 1 and hasattr(runner, "predict_batch"):
        batching: BatchPolicy = runner  # type: ignore[assignment]
        return batching.predict_batch(items)
    results: list[Prediction | Exception] = []
    for images, context in items:
        try:
            results.append(runner.predict(images, context))
        except Exception as exc:  # noqa: BLE001 - handed back as that request's reply
            results.append(exc)
    return results


def request_input(
    slots: FrameSlots, rings: Rings, message: Infer
) -> tuple[FrameSlots, Mapping[str, np.ndarray], RobotContext]:
    """The slots the frames lie in, the frames and the robot's context of one request."""
    index, generation = message.slot, message.generation
    if message.ring is not None:
        # A driver's frames in place: its slot, the state from the message. Whether the driver
        # kept its hands off the slot meanwhile, the control process checks after the reply.
        slots = rings.get(message.ring)
    if not 0 <= index < slots.count:
        raise MessageError(f"observation slot {index} does not exist")
    if message.ring is None:
        slots.check(index, generation)
    images, state = slots.views(index)
    if message.state is not None:
        state = message.state
    context = RobotContext(
        step=message.step,
        episode_start=message.episode_start,
        state_history=state,
        previous_plan=message.plan,
        inference_delay=message.delay,
        memory=message.memory or {},
        prompt=message.prompt,
        past_frames=message.past_frames,
    )
    return slots, images, context


def check_served(slots: FrameSlots, message: Infer) -> None:
    """The runner has copied the inputs to the device and the chunk back: the slot must still
    hold the same observation, or what was served is a torn mix, and its data must be what the
    control process wrote (another process of its user can write the memory)."""
    if message.ring is None:
        slots.check(message.slot, message.generation, intact=True)
