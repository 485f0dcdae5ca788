"""The request side of one inference process: observations out, replies in, never blocking.

    channel = RequestChannel(link, slots, spec, on_reply=note)  # per started process
    request_id = channel.send(images, context)        # frames in a slot (or the driver's), sent
    reply = channel.receive()                         # the next StepReply (`note` told), or None
    prediction = prediction_of(reply)                 # or the exception the reply stands for

Each reply is told to `on_reply` as it is taken (the serving process's record keeps the status
a chunk brings and fails the process on a `fatal` reply), so whoever took it turns it into its
prediction directly, with nothing to hand back.

Frames are copied into the process's observation slots, except those a same-host driver wrote
in place (`SlotFrames` of its session's ring): the first time a ring is seen, the process is
asked to attach it (`attach_ring`, the ring's memory passed along as a descriptor) and that
observation is still copied; once `ring_ready`
comes back, the ring's frames are read where the driver wrote them. A ring the process refused
is not asked for again. Rings of ended sessions are detached on the next send.

The process answers requests one by one, in order; a reply whose id is not the one awaited
answers a request that was given up on and is dropped by the caller. Nothing here blocks,
because the control loop's thread sends: a send to a process that is gone raises ProcessGone,
one to a process that has long stopped reading ProcessStuck. Not thread-safe: its owner
(RemotePolicy) hands it out under a lock.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from controller.errors import InputFault, PolicyError
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.message_codec import as_float32, float32_arrays
from controller.process_protocol.process_channel import ChannelBusy, ChannelError, ProcessChannel
from controller.process_protocol.process_messages import (
    AttachRing,
    ChunkReply,
    DetachRing,
    Infer,
    Message,
    RequestFailed,
    RingReady,
    decode,
    encode,
)
from controller.wire.slot_ring import SlotFrames
from policies.base import Plan, PolicySpec, Prediction, RobotContext

log = logging.getLogger(__name__)

MAX_DRIVER_RINGS = 64  # frame rings attached at once; past it a driver's frames are copied
StepReply = ChunkReply | RequestFailed  # what answers an Infer


class InferenceUnavailable(PolicyError):
    """The inference process is down or restarting; the robots are held meanwhile."""


class RequestChannel:
    def __init__(
        self,
        link: ProcessChannel,
        slots: FrameSlots,
        spec: PolicySpec,
        on_reply: Callable[[StepReply], None] | None = None,
        checkpoint: str | None = None,
    ) -> None:
        """`checkpoint`: the policy.path its process serves (its hello's), None if unsaid."""
        self.link = link
        self.checkpoint = checkpoint
        self.slots = slots
        self.spec = spec
        self._on_reply = on_reply
        self._next_slot = 0
        self._request_id = 0
        # Same-host drivers' frame rings the process has attached: ring -> (id, ring). Keyed by
        # the object: an ended session's /proc path may name the next session's ring.
        self.rings: dict[Any, tuple[int, FrameSlots]] = {}
        self.pinned_rings: set[int] = set()  # of those, the ones pinned for DMA
        self._attaching: dict[int, FrameSlots] = {}  # asked, not answered yet: id -> ring
        # Rings the process could not attach: asked once, then copied (not asked every step).
        self._refused: dict[Any, FrameSlots] = {}

    def send(self, images: Mapping[str, np.ndarray], context: RobotContext) -> int:
        """Send one observation (nothing waits); returns its request id."""
        sent = self.send_batch([(images, context)])[0]
        if isinstance(sent, Exception):
            raise sent
        return sent

    def send_batch(
        self, items: Sequence[tuple[Mapping[str, np.ndarray], RobotContext]]
    ) -> list[int | ValueError]:
        """Send observations the process runs as one batch, their `infer` messages back to
        back (any ring message first), each with how many follow; returns each one's request
        id, or the ValueError that kept it out (frames that do not fit the slots). Each takes
        its own observation slot: one batch in flight at a time, of at most the slots."""
        self._detach_closed_rings()
        if len(items) > self.slots.count:
            raise ValueError(f"{len(items)} requests in one batch, but {self.slots.count} slots")
        prepared: list[Infer | ValueError] = []
        for images, context in items:
            try:
                prepared.append(self._infer(images, context))
            except ValueError as exc:
                prepared.append(exc)
        messages = [m for m in prepared if isinstance(m, Infer)]
        for k, message in enumerate(messages):
            left = len(messages) - 1 - k
            self._send(dataclasses.replace(message, batch_left=left) if left else message)
        return [m.id if isinstance(m, Infer) else m for m in prepared]

    def _infer(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Infer:
        """The observation's frames into a slot (unless they lie in a driver's ring the
        process reads) and its `infer` message, not sent yet."""
        ring = self._driver_ring(images)
        state = None
        if ring is not None and isinstance(images, SlotFrames):
            # Frames in place: the inference process reads the driver's slot itself (no copy
            # here); the state history, which the daemon checked, travels along.
            index, generation = images.index, images.generation
            state = as_float32(context.state_history)
        else:
            ring, index = None, self._next_slot
            self._next_slot = (index + 1) % self.slots.count
            generation = self.slots.write(index, images, context.state_history)
        self._request_id += 1
        plan = context.previous_plan
        return Infer(
            id=self._request_id,
            slot=index,
            generation=generation,
            step=context.step,
            episode_start=context.episode_start,
            delay=context.inference_delay,
            plan=Plan(plan.start_step, as_float32(plan.actions)) if plan is not None else None,
            memory=float32_arrays(context.memory) if context.memory else None,
            ring=ring,
            state=state,
            prompt=context.prompt,
            past_frames=dict(context.past_frames) if context.past_frames is not None else None,
        )

    def receive(self) -> StepReply | None:
        """The next step reply waiting on the channel (answers to ring requests are taken in
        passing), or None when none is there yet (or the process has gone: its supervisor
        sees it exit). Each is told to `on_reply` first."""
        while True:
            data = self.link.receive()
            if data is None:
                return None
            message = decode(data)
            if isinstance(message, RingReady | RequestFailed):
                ring = self._attaching.pop(message.id, None)
                if ring is not None:
                    self._ring_answered(ring, message)
                    continue
            if isinstance(message, ChunkReply | RequestFailed):
                if self._on_reply is not None:
                    self._on_reply(message)
                return message

    def _send(self, message: Message, fds: Sequence[int] = ()) -> None:
        try:
            self.link.send(encode(message), fds=fds)
        except ChannelBusy:
            raise ProcessStuck(
                "the inference process has stopped taking messages; it is restarted and robots "
                "are held meanwhile"
            ) from None
        except ChannelError:
            raise ProcessGone(
                "the inference process is gone; robots are held until it is restarted"
            ) from None

    def _driver_ring(self, images: Mapping[str, np.ndarray]) -> int | None:
        """The id under which the process reads the driver ring these frames lie in, or None:
        not frames in place, not attached (yet), or too many rings; then the frames are
        copied. A ring seen for the first time is asked for."""
        if not isinstance(images, SlotFrames):
            return None
        ring = images.ring
        if not isinstance(ring, FrameSlots) or ring.spec != self.spec or ring.closed:
            return None
        attached = self.rings.get(ring)
        if attached is not None:
            return attached[0]
        self._ask_ring(ring)
        return None

    def _ask_ring(self, ring: FrameSlots) -> None:
        """Ask the process to attach `ring` (unless asked, refused, or too many)."""
        asked = any(r is ring for r in self._attaching.values())
        if asked or ring in self._refused or ring in self.rings:
            return
        if len(self.rings) + len(self._attaching) >= MAX_DRIVER_RINGS:
            return
        try:
            memory = ring.fileno()
        except (ValueError, OSError):  # not created here, or closed meanwhile (a swap asks
            return  # from its own thread): nothing to hand over
        self._request_id += 1
        self._send(AttachRing(self._request_id, str(ring.path), ring.count), [memory])
        self._attaching[self._request_id] = ring

    def attach_rings(self, rings: Sequence[FrameSlots], timeout_s: float = 1.0) -> None:
        """Before this channel serves anyone (its process has no step to run yet): have the
        process attach (and pin) these driver rings now, waiting up to `timeout_s` for its
        answers, so that a robot's first request to it reads its frames in place as every later
        one does, instead of being copied behind an attach and pin the step waits for. A ring
        not answered in time is answered later, as a ring asked for by a request is."""
        for ring in rings:
            if isinstance(ring, FrameSlots) and ring.spec == self.spec and not ring.closed:
                self._ask_ring(ring)
        deadline = time.monotonic() + timeout_s
        while self._attaching and not self.link.closed and time.monotonic() < deadline:
            if self.link.poll(20):
                self.receive()  # ring answers are taken in passing; no step is in flight
        if self._attaching:
            log.info(
                "%d driver frame rings not attached within %.1f s; each is attached by its "
                "robot's first request instead",
                len(self._attaching),
                timeout_s,
            )

    def _ring_answered(self, ring: FrameSlots, reply: RingReady | RequestFailed) -> None:
        if not isinstance(reply, RingReady):
            log.warning("the inference process cannot read a driver's frame ring: %s; its "
                        "frames are copied instead", reply.error)  # fmt: skip
            self._refused[ring] = ring
            return
        ring_id = reply.id
        if ring.closed:  # its session ended while the process attached it
            self._send(DetachRing(ring_id))
            return
        self.rings[ring] = (ring_id, ring)
        if reply.pinned:
            self.pinned_rings.add(ring_id)

    def _detach_closed_rings(self) -> None:
        """Rings of sessions that have ended: the inference process unpins and unmaps them."""
        for key, refused in list(self._refused.items()):
            if refused.closed:
                del self._refused[key]
        for key, (ring_id, ring) in list(self.rings.items()):
            if ring.closed:
                del self.rings[key]
                self.pinned_rings.discard(ring_id)
                self._send(DetachRing(ring_id))


class ProcessGone(PolicyError):
    """A message could not be handed to the inference process: it has gone."""


class ProcessStuck(ProcessGone):
    """The inference process has stopped reading its channel (see process_channel)."""


class ProcessFatal(InferenceUnavailable):
    """The reply says the device is unusable and the process is exiting (a restart follows;
    the robots are held meanwhile)."""


def prediction_of(reply: StepReply) -> Prediction:
    """A step reply as the Policy contract has it: the Prediction, or ValueError (a malformed
    observation), InputFault (the reference fails on it too), ProcessFatal, PolicyError."""
    if isinstance(reply, ChunkReply):
        return Prediction(reply.actions, reply.memory)
    if reply.cause == "refused":
        raise ValueError(reply.error)
    if reply.cause == "input_fault":
        raise InputFault(reply.error)
    if reply.cause == "fatal":
        raise ProcessFatal(f"the inference process failed: {reply.error}")
    raise PolicyError(reply.error)
