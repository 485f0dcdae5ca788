"""What the eager phase timing of flow, pi0 and pi0.5 policies (controller.tools.flow_phases,
pi0_phases) and of a family's own phases (policies.registry.ProfilePhases: family_phase_rows)
runs, and for how long.

In half precision it runs the module the half tiers run (`Runner.half_module`: its weights cast
once, on the device, as served). A copy of its own would double the weights on the GPU, or,
with `runner.reference_weights: host`, sit on the host and stream every layer up on every
call: on an H100 the real-size pi0's phase timing ran for over 5 minutes that way. It also
stops after PHASE_BUDGET_S, with at least PHASE_MIN samples.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from controller.inference.device_timer import DeviceTimer
from controller.inference.half_weights import half_tier_module
from controller.inference.runner import Runner
from controller.inference.tiers import precision_dtype
from controller.tools.profile_result import Row
from policies.inputs import example_frames
from policies.registry import ProfilePhases

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


def family_phase_rows(
    runner: Runner, precision: str, iterations: int, phases: ProfilePhases
) -> list[Row]:
    """Rows (group "phases", shares of the first) of a policy its family times by phase: its
    `measure` called on the eager module over the runner's inputs (the codec's example
    contexts), timed as the flow phases are."""
    path = runner.step_path
    half = precision_dtype(precision) if path.device.type == "cuda" else None
    module = eager_module(runner, half)
    timer = DeviceTimer(path.device)

    def timed(work: Any) -> float:
        return timer.time(work)[1]

    autocast = (
        torch.autocast(path.device.type, dtype=half)
        if half is not None
        else torch.autocast("cpu", enabled=False)
    )
    columns: dict[str, list[float]] = {}
    with torch.no_grad(), path.on_stream(), autocast:
        for i in timed_rounds(iterations):
            seed = 7 + i % 4
            path.upload(example_frames(runner.spec, seed), runner.codec.example(seed))
            measured = phases.measure(module, path.staging.tensors, timed)
            if i < 2:
                continue  # first calls: allocator and kernel caches
            for label, seconds in measured.items():
                columns.setdefault(label, []).append(seconds)
    keys = ["phase:total", *(f"phase:{_slug(label)}" for label in list(columns)[1:])]
    how = f"{timer.how}, eager ({precision})"
    return [
        Row(key, label, "phases", np.asarray(samples), how, keys[0])
        for key, (label, samples) in zip(keys, columns.items(), strict=True)
    ]


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
