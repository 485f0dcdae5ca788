"""One control tick: for every robot, the action for this step, through teleop and the guards.

    chunks from the worker -> the robot's ActionPipeline: ensembler (keyed by absolute step)
        -> action for step t -> teleop blend -> guard chain -> `action` (or `hold`) to the driver

The tick never waits for the model: it uses whatever chunks have landed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from controller.action.guards import Verdict
from controller.daemon.dispatch import Dispatcher
from controller.daemon.session import Session
from controller.errors import ErrorCode
from controller.observe.telemetry import ENSEMBLER, GUARDS, OBS_TO_ACTION, SEND, Telemetry

log = logging.getLogger(__name__)

# Why a tick sends `hold`, by the guard chain's watchdog state (anything else: no action yet).
HOLD_REASONS = {"stop": "stopped", "hold": "stale_observation"}
# The session counter of each hold reason, built once (not a string concatenation per tick).
_HOLD_COUNTERS: dict[str, str] = {}


class ControlLoop:
    def __init__(
        self,
        dispatcher: Dispatcher,
        period_ns: int,
        valid_ticks: float,
        session_timeout_s: float,
        telemetry: Telemetry | None = None,
        serving: Callable[[], bool] = lambda: True,
    ) -> None:
        """serving: whether the policy can answer now; while it cannot (its process is
        restarting), every robot gets `hold` and its plan is dropped, so that what it executes
        after the restart comes only from chunks of the new process."""
        self.dispatcher = dispatcher
        self._serving = serving
        telemetry = telemetry or Telemetry(enabled=False)
        # Checked once here: with telemetry off the tick pays one bool test per section.
        self._timed = telemetry.enabled
        self._clock = telemetry.clock
        self._t_ensembler = telemetry.section(ENSEMBLER)
        self._t_guards = telemetry.section(GUARDS)
        self._t_send = telemetry.section(SEND)
        self._t_obs_to_action = telemetry.section(OBS_TO_ACTION)
        self.period_ns = period_ns
        self.valid_ns = int(valid_ticks * period_ns)
        self.session_timeout_ns = int(session_timeout_s * 1e9)
        self.actions_sent = 0
        self.holds_sent = 0
        self.late_actions_dropped = 0
        self.internal_errors = 0

    def tick(self, step: int, deadline_ns: int, now_ns: int) -> None:
        serving = self._serving()
        for session in self.dispatcher.session_list:
            # Observations keep a session alive; teleop or anything else alone does not.
            if now_ns - session.idle_since_ns > self.session_timeout_ns:
                self.dispatcher.close(session.id, "no observation within server.session_timeout_s")
                continue
            if session.refused:
                self.dispatcher.refusals.tell_refused(session)
            if not serving:
                self._hold_for_restart(session, step)
                continue
            try:
                self._tick_session(session, step, deadline_ns, now_ns)
                # After the send: waking the worker hands it the GIL, which must not delay
                # this tick's actions.
                self.dispatcher.submit_if_due(session, step)
            except Exception:
                # A bug of ours on one robot's tick must not stop the others: hold that robot,
                # end its session (its driver reconnects to a fresh one), keep ticking.
                self.internal_errors += 1
                log.exception(
                    "tick failed for robot %s; holding it and ending its session", session.robot
                )
                self.send_hold(session, step, "internal_error")
                self.dispatcher.refusals.reply(
                    session.identity,
                    ErrorCode.INTERNAL,
                    "the daemon failed on this robot's control tick (see its log); the session "
                    "was ended: say hello again",
                    None,
                )
                self.dispatcher.close(session.id, "internal error on its tick")

    def _tick_session(self, session: Session, step: int, deadline_ns: int, now_ns: int) -> None:
        timed = self._timed
        if timed:
            t = self._clock()
        pipeline = session.pipeline
        new_chunk = None
        while session.chunks:
            chunk = session.chunks.popleft()
            if not session.on_chunk_landed(chunk, step):
                session.counters["chunks_of_ended_episode"] += 1
                continue  # planned before the robot's episode started again
            late = pipeline.on_chunk(chunk.start_step, chunk.actions, step)
            session.counters["late_steps_dropped"] += late
            if late < len(chunk.actions):
                new_chunk = chunk
                session.newest_chunk_obs_seq = max(session.newest_chunk_obs_seq, chunk.obs_seq)
        if pipeline.last_observation_ns == 0:
            self.send_hold(session, step, "no_observation")  # nothing to act on yet
            return

        pipeline.propose(step)
        if timed:
            t = self._t_ensembler.lap(t)
        verdict = pipeline.check(now_ns)
        if timed:
            t = self._t_guards.lap(t)

        valid_until = deadline_ns + self.valid_ns
        # The clock read now, not at the tick's start: with many robots the last send is later.
        if verdict is Verdict.ACTION and time.monotonic_ns() < valid_until:
            session.send_seq += 1
            # In the driver's clock: our deadline shifted by the offset seen on its last
            # observation (which includes transport delay, so the deadline errs early).
            sent = self.dispatcher.send_action(
                session,
                step,
                session.newest_chunk_obs_seq,
                valid_until + session.clock_offset_ns,
                pipeline.command,
            )
            if timed:
                self._t_send.lap(t)
            if not sent:
                # Not delivered (queue full or peer gone): the robot never saw it.
                session.counters["actions_not_delivered"] += 1
                pipeline.not_delivered()
                return
            pipeline.delivered()
            self.actions_sent += 1
            if new_chunk is not None and timed:
                self._t_obs_to_action.record_ns(now_ns - new_chunk.obs_received_ns)
            return
        if verdict is Verdict.ACTION:
            self.late_actions_dropped += 1
        self.send_hold(session, step, HOLD_REASONS.get(pipeline.guards.state, "no_action"))

    def _hold_for_restart(self, session: Session, step: int) -> None:
        session.chunks.clear()  # planned by a process that is gone: never executed
        session.pipeline.drop_plan()
        self.send_hold(session, step, "inference_restarting")

    def send_hold(self, session: Session, step: int, reason: str) -> None:
        session.send_seq += 1
        counter = _HOLD_COUNTERS.get(reason)
        if counter is None:
            counter = _HOLD_COUNTERS[reason] = "hold_" + reason
        session.counters[counter] += 1
        self.holds_sent += 1
        self.dispatcher.send_hold(session, step, reason)
