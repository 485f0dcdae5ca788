"""One connected robot: everything the daemon keeps per driver, fully separate from the others.

The session owns what a policy must remember about its robot (state history, the plan through
the action pipeline, the estimated inference delay, the policy's own memory) and hands it to the
policy as a `RobotContext` with each inference request (built by its `EpisodeContext`,
controller.daemon.episode_context): policies keep no per-robot state. Its state is its own;
other modules change it only through these methods:

    the driver's messages   use_prompt, check_newer, take_observation, own_joints, count
    the inference feed      request_if_due (the feed answers through `queues`), start_episode
    one control tick        take_refusal, land_chunks, drop_plan_for_restart (read);
                            update (update); hold_reason, action_too_late, next_send_seq,
                            delivered, take_fresh_chunk (write)
    its lifetime            idle_since_ns, close

Threading: the loop thread owns a session. The inference feed only takes from `queues.requests`
and appends to `queues.chunks` / `queues.refused` (deques: append and popleft are atomic), so
no lock guards the rest.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping, Sequence

import numpy as np

from controller.action.guards import Verdict
from controller.action.pipeline import ActionPipeline, StepLaps
from controller.daemon.episode_context import EpisodeContext
from controller.daemon.estimates import ClockOffset
from controller.daemon.prompts import Prompt
from controller.daemon.tick_messages import TickHeaders
from controller.errors import ErrorCode, ProtocolError
from controller.feed.inference_feed import Chunk, InferenceQueues, InferenceRequest, Refusal
from controller.feed.pending_requests import PendingObservation
from controller.process_protocol.frame_slots import FrameSlots
from controller.record.tick_observer import NOT_RECORDED, TickObserver
from policies.base import PolicySpec

NEVER = -(10**18)  # the step of the last request (or observation) before there was one
# Why a tick holds, by the guard chain's watchdog state (anything else: no action this step).
HOLD_REASONS = {"stop": "stopped", "hold": "stale_observation"}
log = logging.getLogger(__name__)


class Session:
    """One robot's state, changed only through the methods below (see the module doc)."""

    def __init__(
        self,
        session_id: str,
        identity: bytes,
        robot: str,
        spec: PolicySpec,
        created_ns: int,
        pipeline: ActionPipeline,
        tick_headers: TickHeaders | None = None,
        frame_ring: FrameSlots | None = None,
        recording: TickObserver = NOT_RECORDED,
        lockstep: bool = False,
    ) -> None:
        """`tick_headers`: the tick's packed action and hold headers; `frame_ring`: a same-host
        driver's frames in place (its hello asked for them); `recording`: the observer of this
        robot's ticks (the flight recorder's handle; NOT_RECORDED: off); `lockstep`: the
        robot's world waits for each action (a simulator its driver steps, as LeRobot's eval
        loop does), so a chunk plays from the tick it lands on, never from its observation's
        (no row of it is ever late); a chunk whose first row this tick did not send (held,
        too late, not delivered) lands again at the next tick."""
        self._id = session_id
        self._identity = identity
        self._robot = robot
        self._created_ns = created_ns
        self._pipeline = pipeline
        self._tick_headers = tick_headers
        self._frame_ring = frame_ring
        self.recording = recording
        self._lockstep = lockstep
        self._unsent: Chunk | None = None  # lockstep: landed this tick, its first row not sent
        self._counters: collections.Counter[str] = collections.Counter()
        self._queues = InferenceQueues(robot, spec, self._counters)  # shared with the feed
        self._clock = ClockOffset()
        self._last_observation_ns = 0  # when its last accepted observation came (0: none yet)
        self._last_obs_seq = -1
        self._last_obs_step = NEVER  # the control step of its last accepted observation
        self._send_seq = 0
        self._last_request_step = NEVER
        self._pending: PendingObservation | None = None  # the newest not yet asked about
        self._context = EpisodeContext(robot, spec)  # what the policy is told of this robot
        self._newest_chunk_obs_seq = -1
        # This tick's outcome (update -> write): None: an action in `command`; else why it holds.
        self._hold_reason: str | None = "no_observation"
        self._fresh_chunk: Chunk | None = None  # landed this tick, steps ahead (land_chunks)

    # -- what others may read ----------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._id

    @property
    def identity(self) -> bytes:
        return self._identity

    @property
    def robot(self) -> str:
        return self._robot

    @property
    def pipeline(self) -> ActionPipeline:
        """Read it (guards, teleop, the command); the session is what drives it."""
        return self._pipeline

    @property
    def tick_headers(self) -> TickHeaders | None:
        return self._tick_headers

    @property
    def frame_ring(self) -> FrameSlots | None:
        return self._frame_ring

    @property
    def queues(self) -> InferenceQueues:
        """This robot as the inference feed sees it: what it takes and hands back."""
        return self._queues

    @property
    def counters(self) -> Mapping[str, int]:
        """Events of this robot, for status (the feed adds its own through `queues`)."""
        return self._counters

    @property
    def closed(self) -> bool:
        return self._queues.closed

    @property
    def episode(self) -> int:
        return self._context.episode

    @property
    def episode_start(self) -> bool:
        """No chunk of this episode has come back yet."""
        return self._context.episode_start

    @property
    def memory(self) -> Mapping[str, np.ndarray]:
        """The policy's memory of this robot, as its last chunk left it."""
        return self._context.memory

    @property
    def prompt(self) -> Prompt | None:
        """The robot's task and its token ids; None for a policy that reads no prompt."""
        return self._context.prompt

    @property
    def send_seq(self) -> int:
        """The seq of the last `action` or `hold` sent to this robot."""
        return self._send_seq

    @property
    def last_obs_seq(self) -> int:
        return self._last_obs_seq

    @property
    def clock_offset_ns(self) -> int:
        """Driver's monotonic clock minus ours (see ClockOffset.record)."""
        return self._clock.offset_ns

    @property
    def last_driver_time_ns(self) -> int:
        """time_ns of the newest observation the clock estimate used."""
        return self._clock.last_driver_time_ns

    @property
    def newest_chunk_obs_seq(self) -> int:
        """The newest observation a chunk with steps still ahead was planned from."""
        return self._newest_chunk_obs_seq

    @property
    def pending(self) -> PendingObservation | None:
        return self._pending

    @property
    def inference_delay(self) -> int:
        """Control steps from an observation to its chunk (see InferenceDelay)."""
        return self._context.inference_delay

    @property
    def idle_since_ns(self) -> int:
        """When the session last did what keeps it alive: an accepted observation (or hello)."""
        return self._last_observation_ns or self._created_ns

    # -- the driver's messages ----------------------------------------------------------------

    def count(self, event: str, n: int = 1) -> None:
        """One more `event` of this robot (a counter in status)."""
        self._counters[event] += n

    def use_prompt(self, prompt: Prompt | None) -> None:
        """The robot's task from now on (hello, an episode start); None leaves it as it is."""
        self._context.use_prompt(prompt)

    def check_newer(self, seq: int) -> None:
        """An observation must be newer than the last one accepted: else counted and refused."""
        if seq <= self._last_obs_seq:
            self._counters["stale_observations"] += 1
            raise ProtocolError(
                ErrorCode.STALE,
                f"observation seq {seq} is not newer than {self._last_obs_seq}; dropped",
            )

    def take_observation(
        self,
        obs_seq: int,
        driver_time_ns: int,
        received_ns: int,
        step: int,
        images: dict[str, np.ndarray],
        state: np.ndarray,
        teleop: np.ndarray | None,
        *,
        episode_start: bool,
        resume: bool,
        prompt: Prompt | None = None,
    ) -> None:
        """A checked observation for control step `step`: the clock estimate, the episode, the
        pipeline's watchdog and teleop, and the pending observation the next request is about.
        `prompt`: the task an episode start named (None: the robot keeps its task)."""
        self._last_obs_seq = obs_seq
        self._last_observation_ns = received_ns
        if not self._clock.record(driver_time_ns, received_ns):
            self._counters["clock_jumps"] += 1
        self._counters["observations"] += 1
        if episode_start:
            self.start_episode()  # this robot only: plan, history, memory, chunks in flight
            self.use_prompt(prompt)
        if self._pipeline.on_observation(state, teleop, received_ns, resume):
            # Back from a watchdog hold or stop: chunks planned before it are stale.
            self._queues.chunks.clear()
            self._counters["plans_dropped_after_watchdog"] += 1
        self._pending = PendingObservation(
            step=step,
            since_previous=step - self._last_obs_step,
            obs_seq=obs_seq,
            received_ns=received_ns,
            images=images,
            state_window=self._context.push_state(state),
            past_frames=self._context.push_frames(images),
        )
        self._last_obs_step = step

    def own_joints(self, joints: Sequence[str]) -> tuple[str, ...]:
        """The operator now owns `joints` (teleop); raises ValueError for unknown ones."""
        teleop = self._pipeline.teleop
        teleop.set_owned(joints)
        return tuple(teleop.owned)

    # -- the inference feed -----------------------------------------------------------------

    def start_episode(self) -> None:
        """Forget the plan, the state history, the policy's memory, requests not yet taken and
        chunks in flight; the new episode's first observation is asked about at once."""
        self._context.start()
        self._pipeline.drop_plan()
        self._queues.requests.take()
        self._queues.chunks.clear()
        self._pending = None
        self._last_request_step = NEVER

    def request_if_due(
        self, step: int, query_period: int, at_tick: bool = False
    ) -> InferenceRequest | None:
        """At most every `query_period` steps, the pending observation as a request with this
        robot's context as it is now (and no longer pending); None when not due or nothing new
        came since the last request. `at_tick`: asked from the tick's write, not on arrival."""
        if step - self._last_request_step < query_period:
            return None
        observation = self._pending
        if observation is None:
            return None
        gap, age = observation.since_previous, step - observation.step
        if at_tick and gap >= query_period and 2 * age > gap:
            # It came a query period or more after the robot's previous one, before a request
            # was due, and its robot's next one is nearer than this one is old: asked now, each
            # later one would be as old (the requests' phase stays ahead of the robot's). The
            # next one is asked on arrival instead.
            return None
        self._pending = None
        self._last_request_step = step
        context = self._context.robot_context(observation, self._pipeline.plan(observation.step))
        return InferenceRequest(
            observation.obs_seq,
            observation.received_ns,
            self._context.episode,
            observation.images,
            context,
        )

    # -- one control tick: read ---------------------------------------------------------------

    @property
    def has_refusals(self) -> bool:
        return bool(self._queues.refused)

    def take_refusal(self) -> Refusal | None:
        """The oldest observation the feed refused for its content, not yet told; or None."""
        refused = self._queues.refused
        return refused.popleft() if refused else None

    def land_chunks(self, step: int) -> None:
        """Merge the chunks that came back into the plan, at control step `step`. A chunk of an
        ended episode is dropped; `fresh_chunk` is the last one with steps still ahead (None:
        none this tick)."""
        self._fresh_chunk = None
        self._unsent = None
        chunks = self._queues.chunks
        recording = self.recording
        while chunks:
            chunk = chunks.popleft()
            if not self._context.chunk_landed(chunk, step):
                self._counters["chunks_of_ended_episode"] += 1
                recording.chunk(chunk, step, None)
                continue  # planned before the robot's episode started again
            start = step if self._lockstep else chunk.start_step
            late = self._pipeline.on_chunk(start, chunk.actions, step)
            recording.chunk(chunk, step, late)
            self._counters["late_steps_dropped"] += late
            if late < len(chunk.actions):
                self._fresh_chunk = chunk
                self._unsent = chunk if self._lockstep else None
                self._newest_chunk_obs_seq = max(self._newest_chunk_obs_seq, chunk.obs_seq)

    def take_fresh_chunk(self) -> Chunk | None:
        """The chunk `land_chunks` found fresh this tick (once: not kept past the tick)."""
        chunk, self._fresh_chunk = self._fresh_chunk, None
        return chunk

    def drop_plan_for_restart(self) -> None:
        """The policy's process is restarting or was switched: chunks it planned are never
        executed, an observation received before now is never asked about (it may predate the
        fault), and this tick holds. The new process's first actions are blended in."""
        self._queues.chunks.clear()
        self._pending = None
        self._pipeline.drop_plan(hand_over=True)
        self._hold_reason = "inference_restarting"

    # -- one control tick: update and write ---------------------------------------------------

    def update(self, step: int, now_ns: int, laps: StepLaps | None = None) -> None:
        """This tick's command through the action pipeline (ensembler, teleop, guards): an
        action in `pipeline.command` (`hold_reason` None) or why the robot holds."""
        pipeline = self._pipeline
        if pipeline.last_observation_ns == 0:
            self._hold_reason = "no_observation"  # nothing to act on yet
        elif pipeline.step(step, now_ns, laps) is Verdict.ACTION:
            self._hold_reason = None
        else:
            self._hold_reason = HOLD_REASONS.get(pipeline.guards.state) or self._no_action()
            self._first_row_unsent()

    def _no_action(self) -> str:
        """Why no action: the operator owns joints but the observations carry no teleop values
        (said once in the log, with the joints), or no chunk covers this step."""
        if self._pipeline.teleop_values is None and (owned := self._pipeline.teleop.owned):
            if not self._counters["teleop_no_values"]:
                log.warning("robot %s holds: teleop owns %s but its observations carry no "
                            "teleop values (send_observation(..., teleop=...))",
                            self._robot, ", ".join(owned))  # fmt: skip
            self._counters["teleop_no_values"] += 1
            return "teleop_no_values"
        return "no_action"

    @property
    def hold_reason(self) -> str | None:
        """Why this tick holds; None: it sends the action in `pipeline.command`."""
        return self._hold_reason

    def action_too_late(self) -> str:
        """This tick's action missed its deadline: it holds instead; returns why."""
        self._hold_reason = HOLD_REASONS.get(self._pipeline.guards.state, "no_action")
        self._first_row_unsent()
        return self._hold_reason

    def _first_row_unsent(self) -> None:
        """Lockstep: the world still waits for the chunk that landed this tick, so it lands
        again at the next one, from its first row (a robot in real time moves on)."""
        if self._unsent is not None:
            self._queues.chunks.appendleft(self._unsent)
            self._unsent = None

    def next_send_seq(self) -> int:
        """The seq of the next `action` or `hold` to this robot."""
        self._send_seq += 1
        return self._send_seq

    def delivered(self, sent: bool) -> None:
        """Whether the robot received this tick's action: rate limits count from what it saw."""
        if sent:
            self._pipeline.delivered()
            self._unsent = None
        else:  # queue full or peer gone: the robot never saw it
            self._counters["actions_not_delivered"] += 1
            self._pipeline.not_delivered()
            self._first_row_unsent()

    # -- its lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Ended: the feed skips its requests; its frame ring is closed (the memory lasts
        while an inference in flight still reads it)."""
        self._queues.closed = True
        if self._frame_ring is not None:
            self._frame_ring.close()
