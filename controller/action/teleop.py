"""Per-joint teleop override with bumpless transfer.

Each joint has one owner: the operator (its command is the teleop value the driver sends with each
observation, e.g. from a leader arm) or the policy. `teleop.joints` says which joints the operator
owns at start; `set_owned` changes that at run time.

A joint that changes hands must not jump from where it was to where its new source is. At the
first `mix` after the switch its offset is taken, offset = last command sent - new source, and it
fades linearly to zero over blend_ticks = round(blend_s * rate_hz) ticks:

    command(n) = source(n) + offset * (1 - n / blend_ticks),    n = 1 .. blend_ticks

so the command moves by |offset| / blend_ticks per tick plus the source's own motion, and equals
the source from tick blend_ticks on. A joint that switches again mid-blend starts a new blend from
where it is. blend_s = 0 (or a blend shorter than one tick) switches at once; the guards' velocity
limit still applies. Blends advance per successful `mix` call (tick-based: tests need no clock).

The policy's joints change source too when another policy process starts serving the robot (a
restart, a hot standby's take-over, a swap at once): `hand_over(start)` blends them the same way,
from `start` (where the robot is) to the new policy's first actions.

The mixer only picks and blends; the guards (`controller.action.guards`) then clamp whatever
comes out, teleop values included. Not thread-safe: call from the control-loop thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator


class TeleopConfig(BaseModel):
    """Which joints the operator owns, and how control changes hands."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    joints: tuple[str, ...] = Field(
        default=(),
        description="Joints the operator owns at start; their commands are the teleop values "
        "the driver sends with each observation. Change at run time with a `teleop` message.",
    )
    blend_s: float = Field(
        default=0.5,
        ge=0,
        le=60,
        description="Bumpless hand-over time: a joint that changes hands moves from its last "
        "command to its new source linearly over this long. 0: switch at once.",
    )

    @field_validator("joints")
    @classmethod
    def _no_repeats(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({joint for joint in value if value.count(joint) > 1})
        if repeated:
            raise ValueError(f"joints listed more than once: {', '.join(repeated)}")
        return value


class TeleopMixer:
    """Builds each tick's command from the policy's action and the operator's values."""

    def __init__(self, joint_names: Sequence[str], config: TeleopConfig, rate_hz: float) -> None:
        if not rate_hz > 0:
            raise ValueError(f"rate_hz must be a positive number, not {rate_hz}")
        names = tuple(joint_names)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"joint names must be a non-empty list without repeats: {names}")
        self.joint_names = names
        self._index = {name: i for i, name in enumerate(names)}
        n = len(names)
        self.blend_ticks = max(0, round(config.blend_s * rate_hz))
        self._mask = np.zeros(n, dtype=bool)  # True = operator
        self._pending = np.zeros(n, dtype=bool)  # changed hands; offset taken at the next mix
        self._offset = np.zeros(n)
        self._left = np.zeros(n)  # blend ticks left, per joint
        self._factor = np.zeros(n)
        self._any_pending = False
        self._blending = False
        self._hand_over_from = np.zeros(n)  # where a hand-over's blend starts
        self._has_hand_over = False
        self._mask[self._indices(config.joints, "teleop.joints")] = True
        self._any_operator = bool(self._mask.any())
        self._any_policy = not bool(self._mask.all())

    def _indices(self, joints: Iterable[str], where: str) -> list[int]:
        result = []
        for joint in joints:
            if joint not in self._index:
                raise ValueError(
                    f"{where}: unknown joint {joint!r}; the robot's joints are: "
                    f"{', '.join(self.joint_names)}"
                )
            result.append(self._index[joint])
        return result

    @property
    def owned(self) -> tuple[str, ...]:
        """The joints the operator owns now, in joint order."""
        return tuple(name for name, mine in zip(self.joint_names, self._mask, strict=True) if mine)

    @property
    def mask(self) -> np.ndarray:
        """One bool per joint, True = operator (a copy)."""
        return self._mask.copy()

    @property
    def blending(self) -> bool:
        """True while some joint is still handing over."""
        return self._blending or self._any_pending

    def set_owned(self, joints: Iterable[str]) -> None:
        """Give the operator exactly these joints (the rest go to the policy); joints that
        change hands start a blend. Unknown joint -> ValueError, and nothing changes."""
        mask = np.zeros_like(self._mask)
        mask[self._indices(joints, "teleop")] = True
        changed = mask != self._mask
        self._mask = mask
        self._any_operator = bool(mask.any())
        self._any_policy = not bool(mask.all())
        if self.blend_ticks > 0 and changed.any():
            self._pending |= changed
            self._any_pending = True

    def hand_over(self, start: np.ndarray) -> None:
        """The policy's joints get a new source (another policy process serves from now on):
        at the next mix that forms a command they blend from `start`, as joints changing hands
        do. Called again before that mix, the newer `start` counts."""
        if start.shape != self._mask.shape:
            raise ValueError(
                f"hand-over start has shape {start.shape}, expected {self._mask.shape}"
            )
        if self.blend_ticks == 0 or not self._any_policy:
            return
        np.copyto(self._hand_over_from, start)
        self._has_hand_over = True
        self._pending |= ~self._mask
        self._any_pending = True

    @property
    def handing_over(self) -> bool:
        """True while a hand-over's start waits for the mix that begins its blend."""
        return self._has_hand_over

    def cancel_hand_over(self) -> None:
        """No blend from the hand-over's start (the robot may have been moved since, or begins
        an episode); joints still pending switch at once, as after any dropped plan."""
        self._has_hand_over = False

    def mix(
        self,
        policy_action: np.ndarray | None,
        teleop_values: np.ndarray | None,
        last_command: np.ndarray | None,
        out: np.ndarray,
    ) -> bool:
        """Write the command to send into `out`; False if there is nothing to send.

        False (out untouched, blends do not advance) when a policy joint has no policy action
        yet, or an operator joint no teleop value: the whole action cannot be formed, so the
        loop sends hold. last_command is what was sent last (after the guards), the start of a
        blend; None before anything was sent (a switch then takes effect at once).
        """
        shape = self._mask.shape
        for array in (policy_action, teleop_values, last_command, out):
            if array is not None and array.shape != shape:
                raise ValueError(f"teleop mix: an array has shape {array.shape}, expected {shape}")
        if (self._any_policy and policy_action is None) or (
            self._any_operator and teleop_values is None
        ):
            return False
        if policy_action is not None and self._any_policy:
            np.copyto(out, policy_action)
            if teleop_values is not None and self._any_operator:
                np.copyto(out, teleop_values, where=self._mask)
        elif teleop_values is not None:  # every joint is the operator's
            np.copyto(out, teleop_values)

        if self._any_pending:
            self._start_blends(last_command, out)
        if self._blending:
            left = self._left
            np.subtract(left, 1.0, out=left)
            np.maximum(left, 0.0, out=left)
            np.divide(left, self.blend_ticks, out=self._factor)
            np.multiply(self._offset, self._factor, out=self._factor)
            np.add(out, self._factor, out=out)
            if not np.count_nonzero(left):
                self._blending = False
                self._offset.fill(0.0)
        return True

    def _start_blends(self, last_command: np.ndarray | None, source: np.ndarray) -> None:
        """Take the offsets of joints that changed hands (runs only on a switch tick)."""
        pending = self._pending
        if self._has_hand_over:
            last_command, self._has_hand_over = self._hand_over_from, False
        if last_command is not None:
            offset = np.where(pending, last_command - source, self._offset)
            offset[~np.isfinite(offset)] = 0.0  # a NaN source is the guards' business
            self._offset[:] = offset
            self._left[pending] = self.blend_ticks
            self._blending = True
        pending.fill(False)
        self._any_pending = False
