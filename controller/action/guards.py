"""The safety guard chain every outgoing action passes, whoever produced it (policy or teleop).

    watchdog       the observation is older than hold_after_ms -> HOLD; older than stop_after_ms
                   -> STOP: only holds go out until a fresh observation arrives (and, with
                   resume: explicit, until `resume()` is called as well)
    (a) finite     any NaN/Inf element, or one of a magnitude no joint has (beyond 1e300, where
                   the sums below would overflow) -> the whole action becomes the last safe
                   action (the last one sent, or the seed); with none yet -> HOLD. The guards
                   below still apply:
                   with an acceleration limit a moving joint brakes instead of stopping dead
    (b) position   clamp each joint into its limits
    (c) velocity   clamp each joint's change per tick to max_velocity / rate_hz
    (d) accel      clamp the change of that change to max_acceleration / rate_hz^2 (optional)
    last           the result is checked for finiteness once more (belt and braces), with the
                   same fallback as (a)

Precedence when they disagree: position limits win over the acceleration limit (a joint that the
acceleration limit would carry past its limit stops at the limit), and the velocity limit holds
whatever happens. The one exception: if the last safe action lies outside the position limits
(seeded from a robot standing outside them), the command moves back into range at no more than
the velocity limit instead of jumping.

The rate limits need a start: call `seed()` with the robot's measured joint positions before the
first action (the robot is taken to be at rest then). Without a seed the first action is only
position-clamped. After any tick without an action (HOLD/STOP) the robot is taken to be at rest
again, so the acceleration limit ramps it up from zero. Leaving STOP continues from the last
sent action; re-seed from the observed state if the robot may have been moved meanwhile.

Counters count actions (ticks), not joints: `position_clamped` is the number of actions in which
at least one joint was clamped, and so on. `watchdog_hold` / `watchdog_stop` count entries into
the hold / stop state; `held_ticks` counts every tick that produced no action, for any reason.
`check` allocates nothing.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence

import numpy as np

from controller.action.guards_config import GuardsConfig, check_limit_pair

# Larger than any joint's position in any unit, far enough below float64's 1.8e308 that sums
# of a few such values (last + step + limit) cannot overflow.
_MAGNITUDE = 1e300


class Verdict(enum.Enum):
    """What the loop sends for this tick."""

    ACTION = "action"  # `out` holds the guarded action: send it
    HOLD = "hold"  # send hold: nothing safe to send this tick
    STOP = "stop"  # in the stop state: send hold too, and tell the driver it is stopped


class GuardChain:
    """One robot's guard chain; `check` is called once per tick on the control-loop thread."""

    def __init__(
        self,
        joint_names: Sequence[str],
        config: GuardsConfig,
        rate_hz: float,
        handshake_limits: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        if not (math.isfinite(rate_hz) and rate_hz > 0):
            raise ValueError(f"rate_hz must be a positive number, not {rate_hz}")
        names = tuple(joint_names)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"joint names must be a non-empty list without repeats: {names}")
        self.joint_names = names
        self.config = config
        n = len(names)
        self._n = n
        index = {name: i for i, name in enumerate(names)}

        self._lower = np.full(n, -np.inf)
        self._upper = np.full(n, np.inf)
        sources = (
            ("handshake limits", handshake_limits or {}),
            ("guards.position_limits", config.position_limits),
        )
        for where, limits in sources:
            for joint, (lower, upper) in limits.items():
                i = _joint_index(index, joint, where)
                check_limit_pair(joint, float(lower), float(upper), where)
                self._lower[i] = max(self._lower[i], float(lower))
                self._upper[i] = min(self._upper[i], float(upper))
        for i, joint in enumerate(names):
            if self._lower[i] > self._upper[i]:
                raise ValueError(
                    f"joint {joint!r}: guards.position_limits and the driver's limits do not "
                    "overlap; fix the config so its range lies within the robot's"
                )

        self._max_step = _per_joint(config.max_velocity, index, n, "guards.max_velocity")
        self._max_step /= rate_hz
        self._max_dstep = _per_joint(config.max_acceleration, index, n, "guards.max_acceleration")
        self._max_dstep /= rate_hz * rate_hz
        self._rate_limited = bool(np.isfinite(self._max_step).any())
        self._accel_limited = bool(np.isfinite(self._max_dstep).any())
        self._hold_ns = int(config.hold_after_ms * 1e6)
        self._stop_ns = int(config.stop_after_ms * 1e6)
        self._explicit = config.resume == "explicit"

        self._last = np.zeros(n)  # last safe action: the last sent, or the seed
        self._last_view = self._last.view()
        self._last_view.flags.writeable = False
        self._has_last = False
        self._last_step = np.zeros(n)  # last per-tick change (0 = at rest)
        self._has_step = False
        self._work = np.zeros(n)
        self._lo = np.zeros(n)
        self._hi = np.zeros(n)
        self._changed = np.zeros(n, dtype=bool)

        self._state = "ok"
        self._fresh_since_stop = False
        self._resumed = False
        self._counts = dict.fromkeys(
            (
                "non_finite",
                "position_clamped",
                "velocity_limited",
                "acceleration_limited",
                "watchdog_hold",
                "watchdog_stop",
                "held_ticks",
            ),
            0,
        )

    # -- status ----------------------------------------------------------------------------------

    def describe(self) -> str:
        """Which guards are active, in one line (logged at start for each robot spec)."""
        limited = [
            j for i, j in enumerate(self.joint_names)
            if np.isfinite(self._lower[i]) or np.isfinite(self._upper[i])
        ]  # fmt: skip
        parts = ["non-finite check"]
        parts.append(
            f"position limits on {len(limited)} of {self._n} joints ({', '.join(limited)})"
            if limited
            else "no position limits"
        )
        for label, steps in (("velocity", self._max_step), ("acceleration", self._max_dstep)):
            count = int(np.isfinite(steps).sum())
            parts.append(f"{label} limit on {count} joints" if count else f"no {label} limit")
        parts.append(
            f"watchdog hold after {self.config.hold_after_ms:g} ms, stop after "
            f"{self.config.stop_after_ms:g} ms (resume: {self.config.resume})"
        )
        return ", ".join(parts)

    @property
    def has_position_limits(self) -> bool:
        return bool(np.isfinite(self._lower).any() or np.isfinite(self._upper).any())

    @property
    def counters(self) -> dict[str, int]:
        """Interventions so far (a copy); see the module docstring for what each counts."""
        return dict(self._counts)

    @property
    def state(self) -> str:
        """Watchdog state: "ok", "hold" or "stop"."""
        return self._state

    @property
    def limits(self) -> dict[str, tuple[float, float]]:
        """Effective position limits per joint (for the welcome message); +-inf = unlimited."""
        return {
            name: (float(self._lower[i]), float(self._upper[i]))
            for i, name in enumerate(self.joint_names)
        }

    @property
    def last_action(self) -> np.ndarray | None:
        """The last safe action (the last sent, or the seed), None before the first one.

        A read-only view, updated in place by `check` and `seed` (no allocation per tick: pass
        it to `TeleopMixer.mix` as last_command); copy it to keep a value.
        """
        return self._last_view if self._has_last else None

    # -- inputs besides the action ---------------------------------------------------------------

    def seed(self, position: np.ndarray) -> None:
        """Set the last safe action (the robot's measured joint positions, robot at rest), so
        that rate limits apply from where the robot is."""
        if position.shape != self._last.shape:
            raise ValueError(f"seed has shape {position.shape}, expected {self._last.shape}")
        if not (np.abs(position.astype(np.float64)) < _MAGNITUDE).all():
            raise ValueError("seed position contains NaN, Inf or a value beyond 1e300")
        np.copyto(self._last, position)
        self._has_last = True
        self._last_step.fill(0.0)
        self._has_step = True

    def on_fresh_observation(self) -> None:
        """A new observation arrived from the driver (one of the conditions for leaving STOP)."""
        if self._state == "stop":
            self._fresh_since_stop = True

    def resume(self) -> None:
        """Explicit resume (resume: explicit). Only counts while stopped: it never pre-arms."""
        if self._state == "stop":
            self._resumed = True

    # -- the chain -------------------------------------------------------------------------------

    def check(
        self, proposed: np.ndarray | None, observation_age_ns: int, out: np.ndarray
    ) -> Verdict:
        """Guard one proposed action. On ACTION, `out` holds the action to send and it becomes
        the last sent action; on HOLD or STOP `out` is untouched.

        proposed None (nothing to send for this step, e.g. no chunk yet) gives HOLD and is not
        counted as an intervention.
        """
        counts = self._counts
        verdict = self._watchdog(observation_age_ns)
        if verdict is not None or proposed is None:
            return self._hold(verdict or Verdict.HOLD)
        if proposed.shape != self._last.shape or out.shape != self._last.shape:
            raise ValueError(
                f"action shapes {proposed.shape} -> {out.shape}, expected {self._last.shape}"
            )

        work = self._work
        n = self._n
        # (a) finite and below _MAGNITUDE (NaN compares false, so it fails too): the sums below
        # then stay finite, with no overflow warning. count_nonzero is ~5x cheaper than
        # ndarray.all() on small arrays.
        work[...] = proposed
        np.abs(work, out=self._lo)
        if np.count_nonzero(np.less(self._lo, _MAGNITUDE, out=self._changed)) != n:
            counts["non_finite"] += 1
            if not self._has_last:
                return self._hold(Verdict.HOLD)
            work[...] = self._last
        # (b) position limits (work is finite here: min/max cannot pass a NaN)
        if self._clip(work, self._lower, self._upper):
            counts["position_clamped"] += 1
        if self._has_last:
            last = self._last
            lo, hi = self._lo, self._hi
            # (c) velocity: within max_step of the last action (last +- inf stays inf: no
            # overflow for unlimited joints)
            if self._rate_limited:
                np.subtract(last, self._max_step, out=lo)
                np.add(last, self._max_step, out=hi)
                if self._clip(work, lo, hi):
                    counts["velocity_limited"] += 1
            # (d) acceleration: within max_dstep of last + last change
            if self._accel_limited and self._has_step:
                np.add(last, self._last_step, out=lo)
                np.add(lo, self._max_dstep, out=hi)
                np.subtract(lo, self._max_dstep, out=lo)
                if self._clip(work, lo, hi):
                    counts["acceleration_limited"] += 1
                    # Position limits win: stop at a limit rather than coast through it. The
                    # range widens to include `last`, so a robot seeded outside its limits
                    # is never pushed further out, nor jumped in.
                    np.minimum(self._lower, last, out=lo)
                    np.maximum(self._upper, last, out=hi)
                    np.maximum(work, lo, out=work)
                    np.minimum(work, hi, out=work)

        np.copyto(out, work)
        # Belt and braces: whatever the arithmetic (or a float32 `out`) did, only a finite
        # action leaves.
        if np.count_nonzero(np.isfinite(out, out=self._changed)) != n:
            counts["non_finite"] += 1
            if not self._has_last:
                return self._hold(Verdict.HOLD)
            np.copyto(out, self._last)
        if self._has_last:
            np.subtract(out, self._last, out=self._last_step)
            self._has_step = True
        self._last[...] = out
        self._has_last = True
        return Verdict.ACTION

    def _clip(self, work: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> bool:
        """Clip finite `work` into [lower, upper] in place; True if any element moved."""
        changed = self._changed
        moved = np.count_nonzero(np.less(work, lower, out=changed))
        moved += np.count_nonzero(np.greater(work, upper, out=changed))
        if moved:
            np.maximum(work, lower, out=work)
            np.minimum(work, upper, out=work)
            return True
        return False

    def _watchdog(self, age_ns: int) -> Verdict | None:
        """Advance the watchdog state; the verdict if it forbids an action this tick."""
        state = self._state
        if state == "stop":
            released = self._fresh_since_stop and age_ns < self._hold_ns
            if released and self._explicit:
                released = self._resumed
            if not released:
                return Verdict.STOP
            self._state = state = "ok"
        if age_ns >= self._stop_ns:
            self._state = "stop"
            self._fresh_since_stop = False
            self._resumed = False
            self._counts["watchdog_stop"] += 1
            return Verdict.STOP
        if age_ns >= self._hold_ns:
            if state != "hold":
                self._state = "hold"
                self._counts["watchdog_hold"] += 1
            return Verdict.HOLD
        self._state = "ok"
        return None

    def _hold(self, verdict: Verdict) -> Verdict:
        self._counts["held_ticks"] += 1
        self._last_step.fill(0.0)  # the driver holds: the robot comes to rest
        self._has_step = self._has_last
        return verdict


def _joint_index(index: Mapping[str, int], joint: str, where: str) -> int:
    if joint not in index:
        raise ValueError(
            f"{where}: unknown joint {joint!r}; the robot's joints are: {', '.join(index)}"
        )
    return index[joint]


def _per_joint(
    value: Mapping[str, float] | float | None, index: Mapping[str, int], n: int, where: str
) -> np.ndarray:
    """One number per joint from a config value; +inf where unlimited."""
    result = np.full(n, np.inf)
    if isinstance(value, Mapping):
        for joint, rate in value.items():
            result[_joint_index(index, joint, where)] = float(rate)
    elif value is not None:
        result.fill(float(value))
    return result
