"""A tier's start-up: build it, warm it up, check it against eager FP32 (and against the policy's
reference chunks when it carries some), and fill its TierReport. The runner calls `start_tier`
for every tier from `top_tier` down; a tier that fails any step is marked skipped."""

from __future__ import annotations

import contextlib
import time

import numpy as np

from controller.inference.ladder import (
    Example,
    Progress,
    TierReport,
    check_parity,
    heartbeat,
    reference_examples,
)
from controller.inference.runner_config import RunnerConfig
from controller.inference.step_path import StepPath
from controller.inference.tiers import Tier
from policies.tensor_policy import TensorPolicy


def tier_parity(
    path: StepPath,
    tier: Tier,
    policy: TensorPolicy,
    config: RunnerConfig,
    observations: list[Example],
    references: list[list[np.ndarray]],
) -> tuple[float, float]:
    """The tier's parity error against eager FP32's outputs (the policy's own measure when it
    has one) and its median step time."""
    rtol = config.parity_rtol
    return check_parity(path, tier, observations, references, rtol, measure=policy.parity)


def start_tier(
    path: StepPath,
    tier: Tier,
    report: TierReport,
    policy: TensorPolicy,
    config: RunnerConfig,
    observations: list[Example],
    references: list[list[np.ndarray]],
    say: Progress,
) -> None:
    """Build, warm up and check `tier`; on success `report.state` is "ready", with its build
    time, parity error, step time (and reference error). Raises on the first failure."""
    name = report.name
    built = time.perf_counter()
    verb = {"graph": "compiling and capturing", "compiled": "compiling"}.get(name)
    with heartbeat(say, f"{name}: {verb}") if verb else contextlib.nullcontext():
        path.build(tier)
    report.build_s = time.perf_counter() - built
    for _ in range(config.warmup_steps):
        path.execute(tier, *observations[0])
    report.parity_error, report.step_s = tier_parity(
        path, tier, policy, config, observations, references
    )
    against = ""
    if policy.reference is not None:
        report.reference_error = reference_parity(path, tier, policy, config)
        against = f", {report.reference_error:.1e} against {policy.reference.source}"
    report.state = "ready"
    say(
        f"{name}: ready ({report.precision}, parity error {report.parity_error:.1e}{against}, "
        f"{report.step_s * 1e3:.2f} ms/step, built in {report.build_s:.1f} s)"
    )


def reference_parity(
    path: StepPath, tier: Tier, policy: TensorPolicy, config: RunnerConfig
) -> float:
    """Largest relative error of `tier` against the policy's reference chunks."""
    reference = policy.reference
    if reference is None:
        raise ValueError("the policy has no reference chunks")
    examples = reference_examples(policy.spec, reference)
    chunks = [[chunk] for chunk in reference.chunks]  # the chunk: no extra outputs
    rtol = config.reference_parity_rtol
    try:
        error, _ = check_parity(path, tier, examples, chunks, rtol, "reference_parity_rtol")
    except ValueError as exc:
        raise ValueError(f"against {reference.source}: {exc}") from None
    return error
