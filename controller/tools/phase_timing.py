"""What the eager phase timing of flow, pi0 and pi0.5 policies (controller.tools.flow_phases,
pi0_phases) runs, and for how long.

In half precision it runs the module the half tiers run (`Runner.half_module`: its weights cast
once, on the device, as served). A copy of its own would double the weights on the GPU, or,
with `runner.reference_weights: host`, sit on the host and stream every layer up on every
call: on an H100 the real-size pi0's phase timing ran for over 5 minutes that way. It also
stops after PHASE_BUDGET_S, with at least PHASE_MIN samples.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from controller.inference.half_weights import half_tier_module
from controller.inference.runner import Runner

PHASE_BUDGET_S = 30.0  # of eager phase timing, from its first round (warm-up included)
PHASE_MIN = 5


def eager_module(runner: Runner, half: torch.dtype | None) -> torch.nn.Module:
    """The module the phases are timed on: the half tiers' own in half precision, else the
    FP32 one."""
    if half is not None and runner.half_module is not None:
        return runner.half_module
    return half_tier_module(runner.step_path.module, half, runner.step_path.device)


def timed_rounds(iterations: int) -> Iterator[int]:
    """0, 1, ... for `iterations` rounds plus two warm-up ones, stopping once PHASE_BUDGET_S
    have passed with at least PHASE_MIN measured."""
    began = time.perf_counter()
    for i in range(iterations + 2):
        if i >= 2 + PHASE_MIN and time.perf_counter() - began > PHASE_BUDGET_S:
            return
        yield i
