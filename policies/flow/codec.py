"""What a flow policy's module reads, from one robot's observation and context.

    noise        float32 (H, action_dim): the starting point of sampling, drawn on the host from a
                 generator seeded by (seed, context.step), so a chunk is a pure function of the
                 observation and its context, and every tier can be checked against the reference
    prefix       float32 (H, action_dim), robot units: the previous plan's not-yet-executed
                 actions, row 0 = the new observation's step (context.step), zero-padded
    prefix_len   int64 (): how many rows of `prefix` are real (0 without a previous plan)
    delay        int64 (): the robot's inference delay d in control steps

The RTC mask and weights are built from these on the device (`policies.flow.rtc`).
"""

from __future__ import annotations

import numpy as np

from policies.base import RobotContext


def fill_noise(seed: int, step: int, out: np.ndarray) -> None:
    """Standard normal noise for the chunk of control step `step` into `out` (float32)."""
    rng = np.random.default_rng((seed, max(step, 0)))
    out[...] = rng.standard_normal(out.shape, dtype=np.float32)


def fill_prefix(context: RobotContext, out: np.ndarray) -> int:
    """The previous plan from `context.step` on into `out` (H, action_dim), zero-padded; returns
    the number of valid rows. A plan that starts after the observation's step (a chunk of a
    later observation already landed) or none at all gives 0 rows: nothing to agree with."""
    out.fill(0.0)
    plan = context.previous_plan
    if plan is None:
        return 0
    offset = context.step - plan.start_step
    if offset < 0:
        return 0
    rows = plan.actions[offset : offset + out.shape[0]]
    if rows.ndim != 2 or rows.shape[1] != out.shape[1]:
        raise ValueError(
            f"previous plan has actions of shape {plan.actions.shape}; expected rows of "
            f"{out.shape[1]} actions"
        )
    out[: len(rows)] = rows
    return len(rows)
