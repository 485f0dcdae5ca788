"""One control tick, in three phases over every robot (as ros2_control's read -> update -> write):

    read    what arrived: sessions past their time-out end, refusals from the inference feed
            go to their robots, finished chunks are merged into each robot's plan (the
            drivers' messages were routed between ticks, while the pacer waited)
    update  each robot's command: its ActionPipeline.step (ensembler -> teleop -> guards)
    write   each robot's `action` (or `hold`) through the sender, then its next inference
            request (after every send: waking the feed's thread hands it the GIL, which must
            not delay this tick's actions)

The tick never waits for the model: it uses whatever chunks have landed. While the policy's
process is restarting every robot holds and its plan is dropped, so that what it executes after
the restart comes only from chunks of the new process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from controller.daemon.refusals import Refusals
from controller.daemon.registry import SessionRegistry
from controller.daemon.session import Session
from controller.daemon.tick_sender import TickSender
from controller.daemon.tick_times import TickTimes
from controller.errors import ErrorCode
from controller.feed.pending_requests import InferenceRequests
from controller.observe.log_safety import shown
from controller.observe.telemetry import Telemetry

log = logging.getLogger(__name__)


class ControlLoop:
    def __init__(
        self,
        registry: SessionRegistry,
        sender: TickSender,
        requests: InferenceRequests,
        refusals: Refusals,
        period_ns: int,
        valid_ticks: float,
        telemetry: Telemetry | None = None,
        serving: Callable[[], bool] = lambda: True,
    ) -> None:
        """serving: whether the policy can answer now (False while its process restarts)."""
        self.registry = registry
        self.sender = sender
        self.requests = requests
        self.refusals = refusals
        self.serving = serving  # asked once a tick
        # Checked once here: with telemetry off the tick pays one bool test per robot and phase.
        self._times = TickTimes(telemetry or Telemetry(enabled=False), registry.max_robots)
        self._timed = self._times.enabled
        self.period_ns = period_ns
        self.valid_ns = int(valid_ticks * period_ns)
        self.late_actions_dropped = 0
        self.internal_errors = 0

    def tick(self, step: int, deadline_ns: int, now_ns: int) -> None:
        serving = self.serving()
        self.registry.expire(now_ns)
        sessions = self.registry.live  # this tick's robots, in the same order in every phase
        self._read(sessions, step, serving)
        if serving:
            self._update(sessions, step, now_ns)
        self._write(sessions, step, deadline_ns + self.valid_ns, now_ns, serving)

    def _read(self, sessions: tuple[Session, ...], step: int, serving: bool) -> None:
        times, timed = self._times, self._timed
        for index in range(len(sessions)):
            session = sessions[index]
            try:
                if session.has_refusals:
                    self.refusals.tell_refused(session)
                if not serving:
                    session.drop_plan_for_restart()
                elif timed:
                    started = times.clock()
                    session.land_chunks(step)
                    times.merged(index, started)
                else:
                    session.land_chunks(step)
            except Exception:
                self._failed(session, step)

    def _update(self, sessions: tuple[Session, ...], step: int, now_ns: int) -> None:
        times, timed = self._times, self._timed
        for index in range(len(sessions)):
            session = sessions[index]
            if session.closed:
                continue  # its read failed
            try:
                if timed:
                    times.updating(index)
                    session.update(step, now_ns, times)
                else:
                    session.update(step, now_ns)
            except Exception:
                self._failed(session, step)

    def _write(
        self,
        sessions: tuple[Session, ...],
        step: int,
        valid_until_ns: int,
        now_ns: int,
        serving: bool,
    ) -> None:
        for session in sessions:
            if not session.closed:
                try:
                    self._send(session, step, valid_until_ns, now_ns)
                except Exception:
                    self._failed(session, step)
        if not serving:
            return  # no requests while the policy cannot answer
        for session in sessions:
            if not session.closed:
                try:
                    self.requests.submit_if_due(session, step, at_tick=True)
                except Exception:
                    self._failed(session, step)

    def _send(self, session: Session, step: int, valid_until_ns: int, now_ns: int) -> None:
        reason = session.hold_reason
        fresh = session.take_fresh_chunk()
        if reason is None:
            # The clock read now, not at the tick's start: with many robots the last send is
            # later.
            if time.monotonic_ns() < valid_until_ns:
                timed = self._timed
                if timed:
                    started = self._times.send.start()
                sent = self.sender.action(session, step, valid_until_ns)
                if timed:
                    self._times.send.stop(started)
                session.delivered(sent)
                if sent and fresh is not None and timed:
                    self._times.obs_to_action.record_ns(now_ns - fresh.obs_received_ns)
                pipeline = session.pipeline  # the guards saw `mixed`, sent `command`
                session.recording.command(
                    step, now_ns, None, pipeline.mixed, pipeline.command, pipeline.teleop.owned
                )
                return
            self.late_actions_dropped += 1
            reason = session.action_too_late()
        self.sender.hold(session, step, reason)
        session.recording.command(step, now_ns, reason, None, None, session.pipeline.teleop.owned)

    def _failed(self, session: Session, step: int) -> None:
        """A bug of ours on one robot's tick must not stop the others: hold that robot, end its
        session (its driver reconnects to a fresh one), keep ticking."""
        self.internal_errors += 1
        log.exception(
            "tick failed for robot %s; holding it and ending its session", shown(session.robot)
        )
        self.sender.hold(session, step, "internal_error")
        self.refusals.reply(
            session.identity,
            ErrorCode.INTERNAL,
            "the daemon failed on this robot's control tick (see its log); the session was "
            "ended: say hello again",
            None,
        )
        self.registry.close(session.id, "internal error on its tick")
