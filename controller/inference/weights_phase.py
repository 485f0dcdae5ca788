"""The runner's start-up, its first phase ("weights"): with the model placed on its device
(the runner's step path), open the compile cache, make the half-precision copy, build each
tier and the FP32 reference, hook the host-kept weights in, draw the parity examples. What it
made is one record, which the runner keeps while it serves; the phase's parts are logged
(where a big model's start goes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from controller.inference.compile_cache import CompileCache, open_compile_cache
from controller.inference.examples import Example
from controller.inference.faults import FaultPlan, FaultyTier
from controller.inference.host_weights import stream_host_weights
from controller.inference.progress import Progress
from controller.inference.step_path import StepPath
from controller.inference.tier_checks import tier_names
from controller.inference.tier_report import TierReport
from controller.inference.tiers import EagerTier, Tier, build_tiers, half_tier_weights
from controller.runner_config import RunnerConfig
from policies.base import PolicySpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlacedWeights:
    tiers: dict[str, Tier]  # each tier to check, a FaultyTier where the runner's faults say
    reference: Tier  # eager FP32 on the placed module: what every tier is checked against
    half_module: nn.Module  # what the half-precision tiers run
    cache: CompileCache | None
    examples: list[Example]  # the parity observations


def place_weights(
    path: StepPath,
    spec: PolicySpec,
    config: RunnerConfig,
    faults: Mapping[str, FaultPlan],
    reports: dict[str, TierReport],
    examples: Callable[[], list[Example]],
    say: Progress,
    started: float,
) -> PlacedWeights:
    """started: when start-up began (time.perf_counter), placing the module included."""
    parts: list[tuple[str, float]] = [("", started)]

    def part(name: str) -> None:
        parts.append((name, time.perf_counter()))

    part("placing")
    device, module = path.device, path.module
    host_weights = config.reference_weights == "host"
    names = tier_names(device, config, reports)
    cache = open_compile_cache(names, spec, module, config, device)
    if cache is not None:
        say(f"compile cache: {cache.outcome} ({cache.file})")
    part("compile cache")
    exact: dict[int, torch.Tensor] | None = {} if host_weights else None
    half_module = half_tier_weights(names, module, config, device, exact)
    part("half copy")
    tiers = build_tiers(names, module, path.staging, config, half_module)
    part("tiers")
    if host_weights:  # after the half copy is made, which must not take the hooks along
        say(stream_host_weights(module, device, exact).describe())
        part("reference hooks")
    faulty: dict[str, Tier] = {
        name: FaultyTier(tier, faults[name]) if name in faults else tier
        for name, tier in tiers.items()
    }
    reference = EagerTier("eager_fp32", module, path.staging, None)
    observations = examples()
    part("examples")
    log.info(
        "weights phase: %s",
        ", ".join(
            f"{name} {now - before:.2f} s"
            for (_, before), (name, now) in zip(parts, parts[1:], strict=False)
        ),
    )
    return PlacedWeights(faulty, reference, half_module, cache, observations)
