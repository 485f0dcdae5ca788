"""One robot's path from action chunks to the command it is sent, as one object.

    on_chunk(start_step, actions, step)        a chunk landed: merge it (ensembler), keep the plan
    on_observation(state, teleop, now, resume)  a fresh observation: watchdog, rate-limit seed
    propose(step)                               the ensembler's action for this step
    check(now)                                  teleop mix -> guard chain -> verdict, `command`
    step(step, now, laps)                       propose + check (laps: when a caller times each)
    delivered() / not_delivered()               what the robot actually received
    drop_plan(hand_over)                        forget every chunk (new episode, back from a stop;
                                                hand_over: a new policy process, blended in)

The daemon's loop and the profiling tools drive the same object, so what a profile times is what
the daemon serves. Buffers are allocated once; no call allocates per tick except `plan()`, which
the session calls once per inference request. Not thread-safe: the loop thread owns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

import numpy as np

from controller.action.ensembler import ChunkEnsembler
from controller.action.guards import GuardChain, Verdict
from controller.action.guards_config import GuardsConfig
from controller.action.teleop import TeleopConfig, TeleopMixer
from policies.base import Plan, PolicySpec


class StepLaps(Protocol):
    """Told when each part of `step` is done, by a caller that times them (the daemon's tick)."""

    def proposed(self) -> None: ...

    def checked(self) -> None: ...


class ActionPipeline:
    def __init__(
        self,
        spec: PolicySpec,
        guards: GuardsConfig,
        teleop: TeleopConfig,
        rate_hz: float,
        ensemble: Literal["temporal", "newest"] = "temporal",
        temporal_k: float = 0.01,
        driver_limits: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        """Raises ValueError when `driver_limits` name unknown joints or have lower > upper."""
        joints = spec.joint_names
        self.ensembler = ChunkEnsembler(spec.chunk_size, spec.action_dim, ensemble, temporal_k)
        self.guards = GuardChain(joints, guards, rate_hz, handshake_limits=driver_limits)
        self.teleop = TeleopMixer(joints, teleop, rate_hz)
        # Rate limits start from where the robot is when its state is its joint positions.
        self._state_is_position = spec.state_size == spec.action_dim
        dim = spec.action_dim
        self.proposed = np.zeros(dim, dtype=np.float32)
        self.mixed = np.zeros(dim, dtype=np.float32)
        self.command = np.zeros(dim, dtype=np.float32)
        self.last_command: np.ndarray | None = None  # the last command the robot received
        self.teleop_values: np.ndarray | None = None
        self.last_observation_ns = 0  # 0: no observation yet
        self._position = np.zeros(dim, dtype=np.float32)  # the last observed state, if position
        self._has_position = False
        self._has_proposal = False
        self._plan_start = 0
        self._plan: np.ndarray | None = None  # the newest chunk that still had steps ahead

    # -- inputs ----------------------------------------------------------------------------

    def on_chunk(self, start_step: int, actions: np.ndarray, step: int) -> int:
        """Merge a chunk predicted for `start_step` at control step `step`; returns how many of
        its rows were already past (dropped). A chunk with steps ahead becomes the plan."""
        late = self.ensembler.add_chunk(start_step, actions, step)
        if late < len(actions) and start_step >= self._plan_start:
            self._plan_start, self._plan = start_step, actions
        return late

    def on_observation(
        self,
        state: np.ndarray,
        teleop: np.ndarray | None,
        now_ns: int,
        resume: bool = False,
    ) -> bool:
        """A fresh, checked observation. Returns True when the plan was dropped because the
        robot comes back from a watchdog hold or stop (it may have been moved meanwhile)."""
        dropped = self.guards.state != "ok"
        if dropped:
            self.drop_plan()
        if self._state_is_position:
            np.copyto(self._position, state)
            self._has_position = True
            if self.last_command is None:
                self.guards.seed(state)
            if self.teleop.handing_over:  # the blend starts from the robot's newest position
                self.teleop.hand_over(self._position)
        self.guards.on_fresh_observation()
        if resume:
            self.guards.resume()  # leaves the stop state when guards.resume is 'explicit'
        self.teleop_values = teleop
        self.last_observation_ns = now_ns
        return dropped

    def drop_plan(self, hand_over: bool = False) -> None:
        """Forget every chunk and where the robot was commanded last: rate limits restart from
        the next observation. `hand_over`: another policy process serves from now on (a
        restart, a take-over, a swap at once), so the policy's first actions are blended in
        from where the robot is (its last state when that is its joint positions, else its
        last command) as a teleop hand-over is (teleop.blend_s); otherwise (a new episode, back
        from a stop) no blend."""
        if not hand_over:
            self.teleop.cancel_hand_over()
        elif self._has_position:
            self.teleop.hand_over(self._position)
        elif self.last_command is not None:  # not yet forgotten: the first drop since serving
            self.teleop.hand_over(self.last_command)
        self.ensembler.reset()
        self.last_command = None
        self._plan, self._plan_start = None, 0

    # -- one tick --------------------------------------------------------------------------

    def propose(self, step: int) -> bool:
        """The policy's action for `step` into `proposed`; False when no chunk covers it."""
        self._has_proposal = self.ensembler.action_at(step, self.proposed)
        return self._has_proposal

    def check(self, now_ns: int) -> Verdict:
        """Teleop mix and the guard chain on the last proposal; the command is `command`."""
        mixed = self.teleop.mix(
            self.proposed if self._has_proposal else None,
            self.teleop_values,
            self.last_command,
            self.mixed,
        )
        age_ns = now_ns - self.last_observation_ns
        return self.guards.check(self.mixed if mixed else None, age_ns, self.command)

    def step(self, step: int, now_ns: int, laps: StepLaps | None = None) -> Verdict:
        """This tick's verdict, its command in `command`: propose, then check."""
        self.propose(step)
        if laps is not None:
            laps.proposed()
        verdict = self.check(now_ns)
        if laps is not None:
            laps.checked()
        return verdict

    def delivered(self) -> None:
        """The robot received `command`: rate limits count from it."""
        if self.last_command is None:
            self.last_command = self.command.copy()
        else:
            self.last_command[:] = self.command

    def not_delivered(self) -> None:
        """The robot never saw `command`: rate limits keep counting from the last it did see."""
        if self.last_command is not None:
            self.guards.seed(self.last_command)

    # -- what the policy is told -----------------------------------------------------------

    def plan(self, step: int) -> Plan | None:
        """The robot's not-yet-executed actions from `step` on (of the newest chunk), or None."""
        if self._plan is None:
            return None
        offset = step - self._plan_start
        if offset >= len(self._plan):
            return None
        offset = max(offset, 0)
        return Plan(start_step=self._plan_start + offset, actions=self._plan[offset:].copy())
