"""A chunk that a client executes itself (openpi's protocol), passed row by row through the same
guard chain every streamed action passes (controller.action.guards), as if each row were one
control tick with a fresh observation: non-finite rows refused, joint position limits clamped,
the change from row to row limited by guards.max_velocity and max_acceleration at the control
rate. A fresh chain per chunk, seeded from the observed state when the state is the joint
positions (as ActionPipeline seeds its own), so row 0 is rate-limited from where the robot is;
otherwise row 0 is only position-clamped. Without rate limits configured the chain is only the
finite check and the clamp, done on the whole chunk at once (the same result, counted the same:
per row). What the chain cannot do here (the watchdog, action
deadlines, teleop) needs the daemon to execute the chunk: the streaming path.

    limits = ChunkLimits(spec, config.guards, config.control.rate_hz)
    safe, counts = limits.apply(chunk, state)     # counts: the chain's intervention counters
"""

from __future__ import annotations

import numpy as np

from controller.action.guards import GuardChain, Verdict
from controller.action.guards_config import GuardsConfig
from policies.base import PolicySpec


class ChunkLimits:
    def __init__(self, spec: PolicySpec, guards: GuardsConfig, rate_hz: float) -> None:
        """Raises ValueError as GuardChain does (guards naming joints the policy lacks)."""
        self.joint_names = spec.joint_names
        self.guards = guards
        self.rate_hz = rate_hz
        self._state_is_position = spec.state_size == spec.action_dim
        chain = GuardChain(self.joint_names, guards, rate_hz)
        self.describe = chain.describe()
        self._rate_limited = guards.max_velocity is not None or guards.max_acceleration is not None
        bounds = np.array(list(chain.limits.values()), dtype=np.float64).reshape(-1, 2)
        self._lower, self._upper = bounds[:, 0], bounds[:, 1]

    def apply(self, actions: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
        """The chunk as the client may execute it (float32, a new array), and how often each
        guard intervened; ValueError when a row has no safe value (non-finite, nothing before)."""
        if not self._rate_limited:
            return self._clamped(actions)
        chain = GuardChain(self.joint_names, self.guards, self.rate_hz)
        if self._state_is_position and np.isfinite(state).all():
            chain.seed(state.astype(np.float64))
        out = np.empty(actions.shape, dtype=np.float32)
        for row in range(actions.shape[0]):
            if chain.check(actions[row], 0, out[row]) is not Verdict.ACTION:
                raise ValueError(f"row {row} of the chunk has no safe value")
        return out, chain.counters

    def _clamped(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
        if not np.isfinite(actions).all():
            raise ValueError("the chunk holds NaN or Inf")
        out = np.clip(actions, self._lower, self._upper).astype(np.float32)
        moved = (actions < self._lower) | (actions > self._upper)
        return out, {"position_clamped": int(np.count_nonzero(moved.any(axis=1)))}
