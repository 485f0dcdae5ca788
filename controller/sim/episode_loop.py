"""One episode of a simulated environment driven through the daemon, under one of two clocks:

- `realtime`: the environment advances one frame every 1/fps seconds of wall-clock time, as a
  robot does. Each frame applies the newest action the daemon sent; until a first one (or when
  the daemon holds) the last action is held, as on hardware. A frame that starts later than a
  period after its due time is a missed tick (the simulator itself was too slow).
- `lockstep`: after each observation the environment waits for the first action computed from
  it (LeRobot's eval loop), so inference time never shows. With a query every step
  (n_action_steps 1) the actions are LeRobot's (scripts/parity/check_eval_parity.py): the
  client says lockstep in its hello, so each chunk plays from the tick it lands on, and the
  first action computed from an observation (FirstAnswers) is its chunk's first row.

Only numpy and the client (a driver's install runs this).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.errors import DaemonUnavailable
from controller.observe.histogram import Histogram
from controller.sim.clocks import CLOCKS
from controller.sim.envs.adapter import EnvObservation, SimEnv
from controller.sim.first_answers import FirstAnswers
from controller.wire.client import TempoClient

POLL_S = 0.002  # how long one receive waits for the daemon
# Lockstep: an observation unanswered this long is sent again. A lockstep session's chunks are
# never late, so this is for an inference process that restarted meanwhile (it never answers
# what it was asked before): long enough for a slow step on a loaded CPU not to be asked twice.
RESEND_AFTER_S = 10.0
SETTLE_PERIODS = 10  # realtime: at most this many frames' time waiting for the last answer


@dataclass
class EpisodeResult:
    seed: int
    clock: str
    success: bool = False
    episode_return: float = 0.0
    length: int = 0
    missed_ticks: int = 0  # realtime: frames begun more than a period late
    holds: int = 0  # frames that applied no fresh action (the last one held)
    resent: int = 0  # lockstep: observations sent again, unanswered (see RESEND_AFTER_S)
    actions_applied: int = 0
    latency_ms_p50: float = float("nan")  # observation sent -> first action computed from it
    latency_ms_p99: float = float("nan")
    wall_s: float = 0.0
    frames: list[np.ndarray] = field(default_factory=list, repr=False)  # when asked, for video

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "clock": self.clock,
            "success": self.success,
            "return": self.episode_return,
            "length": self.length,
            "missed_ticks": self.missed_ticks,
            "holds": self.holds,
            "resent": self.resent,
            "actions_applied": self.actions_applied,
            # None when no action answered an observation (JSON has no NaN)
            "latency_ms_p50": None if np.isnan(self.latency_ms_p50) else self.latency_ms_p50,
            "latency_ms_p99": None if np.isnan(self.latency_ms_p99) else self.latency_ms_p99,
            "wall_s": self.wall_s,
        }


class _Latency:
    """Observation seq -> send time, and the histogram of send -> first action from it."""

    def __init__(self) -> None:
        self.histogram = Histogram()
        self.sent: dict[int, int] = {}

    def sent_now(self, seq: int | None) -> None:
        if seq is not None:
            self.sent[seq] = time.monotonic_ns()
            for old in [s for s in self.sent if s < seq - 64]:
                del self.sent[old]

    def answered(self, obs_seq: int) -> None:
        sent = self.sent.pop(obs_seq, None)
        if sent is not None:
            self.histogram.record_ns(time.monotonic_ns() - sent)


def run_episode(
    client: TempoClient,
    env: SimEnv,
    seed: int,
    clock: str = "lockstep",
    max_steps: int | None = None,
    keep_frames: bool = False,
    action_wait_s: float = 60.0,
    on_step: Callable[[EnvObservation, np.ndarray], None] | None = None,
    answers: FirstAnswers | None = None,
) -> EpisodeResult:
    """Run one episode from `env.reset(seed)` until the environment ends it or `max_steps`
    (default the layout's); `on_step` sees each observation and the action applied to it.
    Lockstep needs `answers`, the client's FirstAnswers (connect_env_client makes the client
    with one), and raises DaemonUnavailable when no action comes within `action_wait_s`."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, not {clock!r}")
    if clock == "lockstep" and answers is None:
        raise ValueError("lockstep needs the client's FirstAnswers (connect_env_client's)")
    steps = max_steps if max_steps is not None else env.layout.max_steps
    result = EpisodeResult(seed=seed, clock=clock)
    latency = _Latency()
    observation = env.reset(seed)
    held = observation.state[: len(env.layout.joints)].copy()  # hold still until an action
    period_ns = int(1e9 / env.layout.fps)
    started = time.monotonic_ns()
    due = started
    seq = client.send_observation(observation.images, observation.state, episode_start=True)
    latency.sent_now(seq)
    for _ in range(steps):
        if keep_frames:
            result.frames.append(env.render())
        if clock == "lockstep" and answers is not None:  # (answers: checked above)
            action, seq = _wait_for_action(
                client, answers, observation, seq, latency, action_wait_s, result
            )
            fresh = True
        else:
            due += period_ns
            _sleep_until(client, due, latency)
            if time.monotonic_ns() - due > period_ns:
                result.missed_ticks += 1
                due = time.monotonic_ns()  # never run faster to catch up
            command = client.receive()
            fresh = command.kind == "action" and command.action is not None
            action = command.action if fresh and command.action is not None else held
            if fresh:
                latency.answered(command.obs_seq)
        if fresh:
            result.actions_applied += 1
        else:
            result.holds += 1
        held = np.asarray(action, dtype=np.float32).copy()
        if on_step is not None:
            on_step(observation, held)
        step = env.step(held)
        result.length += 1
        result.episode_return += step.reward
        result.success = result.success or step.success
        observation = step.observation
        if step.done or result.length >= steps:
            break
        seq = client.send_observation(observation.images, observation.state)
        latency.sent_now(seq)
    if clock == "realtime":
        # The daemon drops what is in flight at the next episode start; wait a little for it
        # here, so the next episode's first observation is asked about at once. A chunk that
        # lands too late for its step is dropped and never answers: the wait is bounded.
        _settle(client, seq, SETTLE_PERIODS / env.layout.fps)
    result.wall_s = (time.monotonic_ns() - started) / 1e9
    p50, p99 = latency.histogram.percentiles((50, 99))
    result.latency_ms_p50 = float("nan") if p50 is None else p50 * 1e3
    result.latency_ms_p99 = float("nan") if p99 is None else p99 * 1e3
    return result


def _wait_for_action(
    client: TempoClient,
    answers: FirstAnswers,
    observation: EnvObservation,
    seq: int | None,
    latency: _Latency,
    wait_s: float,
    counts: EpisodeResult,
) -> tuple[np.ndarray, int | None]:
    """The first action the daemon computed from `observation` (sent as `seq`), and the seq it
    was computed from. A reconnection (the daemon restarted, or fell silent) loses the
    observation with the session: it is sent again, as an episode start (the new session's
    first)."""
    deadline = time.monotonic() + wait_s
    resend_at = time.monotonic() + RESEND_AFTER_S
    session = client.welcome.session if client.welcome is not None else None
    while time.monotonic() < deadline:
        client.receive(timeout_s=POLL_S)  # FirstAnswers sees what arrives
        now_session = client.welcome.session if client.welcome is not None else None
        new_session = now_session is not None and (now_session != session or seq is None)
        if new_session or time.monotonic() > resend_at:
            # The world is frozen: the same observation again, under a fresh seq.
            session = now_session
            images = {name: frame.copy() for name, frame in observation.images.items()}
            seq = client.send_observation(images, observation.state, episode_start=new_session)
            latency.sent_now(seq)
            resend_at = time.monotonic() + RESEND_AFTER_S
            counts.resent += 1
            continue
        if seq is not None and (first := answers.take(seq)) is not None:
            latency.answered(seq)
            return first[0], seq
    raise DaemonUnavailable(
        f"no action computed from observation {seq} came within {wait_s:.0f} s (lockstep); "
        f"the client's last error: {client.counters.last_error or 'none'}"
    )


def _settle(client: TempoClient, seq: int | None, wait_s: float) -> None:
    """Wait (up to `wait_s`) until the daemon has answered observation `seq`."""
    deadline = time.monotonic() + wait_s
    while seq is not None and time.monotonic() < deadline:
        command = client.receive(timeout_s=POLL_S)
        if command.obs_seq >= seq:
            return


def _sleep_until(client: TempoClient, due_ns: int, latency: _Latency) -> None:
    """Wait for the frame's due time, taking the daemon's messages meanwhile (the newest action
    is what the frame applies; each observation's first answer is timed as it arrives)."""
    while True:
        remaining = due_ns - time.monotonic_ns()
        if remaining <= 0:
            return
        command = client.receive(timeout_s=min(remaining / 1e9, POLL_S))
        if command.kind == "action":
            latency.answered(command.obs_seq)
