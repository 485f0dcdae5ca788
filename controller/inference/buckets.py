"""Batch-size buckets: several robots in one step.

    buckets = start_buckets(path, sizes, ready, ...)    # at start-up, after batch 1's tiers
    groups = split_into_buckets(n_waiting, usable)       # which bucket serves which requests

The runner serves a step of `n` waiting robots (one request each) from the smallest bucket of
at least `n` rows (the largest when none is that big, then the rest again): each robot in its
own row of the bucket's static inputs, the rows past them a copy of row 0 whose outputs are
discarded. Batch 1 is the bucket of size 1, the runner's own step path and tiers; every larger
bucket has its own static inputs and output buffers (`StepPath.for_batch`) and its own tiers
over them, sharing the module and its half-precision weights: the graph tier captures one CUDA
graph per bucket and the compiled tier compiles once per bucket size (dynamic=False; the
compiles share the compile cache); the eager tiers take any size.

A bucket's tiers are the ones batch 1 found ready, each built and checked against eager FP32's
outputs for the same examples as at batch 1, now placed in different rows (start-up parity
per bucket); a tier that fails a bucket is dropped from that bucket only (logged), and while
that tier serves, the bucket is not used. A robot's chunk depends only on its own row: every
policy family's module treats batch rows independently, and its codec writes one row from one
robot's context (`policies.inputs`). A codec that cannot (its `batch_refusal` says why) keeps
batch 1.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

from controller.inference.examples import Example
from controller.inference.parity import NonFiniteOutput, all_finite, relative_error
from controller.inference.progress import Progress, first_line
from controller.inference.step_path import StepPath
from controller.inference.tiers import Tier, build_tiers
from controller.runner_config import RunnerConfig, TierName
from policies.tensor_policy import TensorPolicy

log = logging.getLogger(__name__)


@dataclass
class Bucket:
    """One batch size: its step path, its tiers, and how each fared at start-up."""

    size: int
    path: StepPath
    tiers: dict[str, Tier]
    step_s: dict[str, float] = field(default_factory=dict)  # ready tiers: median step time
    skipped: dict[str, str] = field(default_factory=dict)  # tier -> why it does not serve here
    steps: int = 0  # steps served from this bucket

    def serves(self, tier: str | None) -> bool:
        return tier in self.step_s

    def as_dict(self) -> dict[str, object]:
        return {
            "size": self.size,
            "steps": self.steps,
            "step_ms": {name: round(s * 1e3, 4) for name, s in self.step_s.items()},
            "skipped": dict(self.skipped),
        }


def batch_sizes_for(policy: TensorPolicy, sizes: Sequence[int]) -> tuple[int, ...]:
    """The bucket sizes the runner serves: `sizes` (sorted, with 1), or only 1 for a policy
    whose codec says it cannot batch (logged once, with its reason)."""
    wanted = tuple(sorted({1, *sizes}))
    refusal = getattr(policy.inputs, "batch_refusal", None)
    if refusal and len(wanted) > 1:
        log.info("the policy serves one robot a step (batch sizes %s ignored): %s",
                 list(wanted[1:]), refusal)  # fmt: skip
        return (1,)
    return wanted


def start_buckets(
    base: StepPath,
    sizes: Sequence[int],
    ready: list[str],
    module: torch.nn.Module,
    half_module: torch.nn.Module,
    config: RunnerConfig,
    policy: TensorPolicy,
    examples: list[Example],
    references: list[list[np.ndarray]],
    say: Progress,
) -> dict[int, Bucket]:
    """Every bucket above batch 1: each tier of `ready` built over the bucket's own inputs,
    warmed up and checked; a tier that fails is dropped from that bucket, logged."""
    buckets: dict[int, Bucket] = {}
    for size in sizes:
        if size == 1:
            continue
        path = base.for_batch(size)
        names = cast(list[TierName], list(ready))
        built = build_tiers(names, module, path.staging, config, half_module=half_module)
        tiers: dict[str, Tier] = {name: tier for name, tier in built.items()}
        bucket = Bucket(size, path, tiers)
        for name, tier in tiers.items():
            try:
                path.build(tier)
                step_s = bucket_parity(path, tier, policy, config, examples, references)
            except Exception as exc:  # noqa: BLE001 - one bucket's tier failing drops only it
                bucket.skipped[name] = first_line(exc)
                log.warning("batch %d: tier %s dropped: %s", size, name, bucket.skipped[name])
                continue
            bucket.step_s[name] = step_s
            say(f"batch {size}: {name} ready ({bucket.step_s[name] * 1e3:.2f} ms/step)")
        buckets[size] = bucket
    return buckets


def bucket_parity(
    path: StepPath,
    tier: Tier,
    policy: TensorPolicy,
    config: RunnerConfig,
    examples: list[Example],
    references: list[list[np.ndarray]],
) -> float:
    """Run `tier` on batches of the examples, each example in turn in every row, and check
    each row against the FP32 reference's outputs for that example alone (the policy's own
    measure when it has one, else `parity_rtol`); returns the median step time. Raises at the
    first non-finite row or error over the tolerance."""
    size, count = path.batch, len(examples)
    measure = policy.parity
    rtol = measure.tolerance if measure is not None else config.parity_rtol
    times = []
    for _ in range(config.warmup_steps):
        run_batch(path, tier, [examples[k % count] for k in range(size)])
    for first in range(count):
        order = [(first + row) % count for row in range(size)]
        began = time.perf_counter()
        rows = run_batch(path, tier, [examples[k] for k in order])
        times.append(time.perf_counter() - began)
        for row, k in enumerate(order):
            out, ref = rows[row], references[k]
            if not all_finite(out):
                raise NonFiniteOutput(f"non-finite output in row {row} of a batch of {size}")
            if measure is not None:
                error = measure.error(examples[k][1], out, ref)
            else:
                error = max(relative_error(o, r) for o, r in zip(out, ref, strict=True))
            if error > rtol:
                raise ValueError(
                    f"parity error {error:.2e} exceeds {rtol:.2g} in row {row} of a batch of {size}"
                )
    return float(np.median(times))


def run_batch(path: StepPath, tier: Tier, items: Sequence[Example]) -> list[list[np.ndarray]]:
    """Stage `items` into the path's rows, run `tier`, and return each item's outputs (start-up
    and tests; the serving step does the same inside the path's scope)."""
    with torch.no_grad(), path.on_stream():
        refused = path.stage_rows(items)
        for error in refused:
            if error is not None:
                raise error
        return path.run_rows(tier, len(items))


def split_into_buckets(count: int, sizes: Sequence[int]) -> list[tuple[int, int]]:
    """`count` waiting requests as (bucket size, requests in it) steps, in order: the smallest
    of `sizes` (ascending, with 1) that holds them all, else the largest, then the rest the same
    way. Five requests with sizes (1, 2, 4) are [(4, 4), (1, 1)]; three are [(4, 3)]."""
    steps = []
    while count > 0:
        size = next((s for s in sizes if s >= count), sizes[-1])
        taken = min(size, count)
        steps.append((size, taken))
        count -= taken
    return steps
