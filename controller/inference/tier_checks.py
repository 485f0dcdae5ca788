"""The tiers' start-up: which tiers to try (`tier_names`), then for each one (`start_tiers`): build
it, warm it up, check it against eager FP32 (and against the policy's reference chunks when it
carries some), and fill its TierReport. A tier that fails any step is marked skipped, with the
reason; the runner serves from the highest that passed."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from controller.errors import PolicyError
from controller.inference.examples import Example, reference_examples
from controller.inference.ladder import ServingLadder
from controller.inference.parity import NonFiniteOutput, check_parity, reference_outputs
from controller.inference.progress import Progress, first_line, heartbeat
from controller.inference.step_path import StepPath
from controller.inference.tier_report import TierReport
from controller.inference.tiers import EagerTier, Tier
from controller.runner_config import TIER_ORDER, RunnerConfig, TierName
from policies.tensor_policy import TensorPolicy

log = logging.getLogger(__name__)


def tier_names(
    device: torch.device, config: RunnerConfig, reports: dict[str, TierReport]
) -> list[TierName]:
    """The tiers to start, from `top_tier` down, each given a report in `reports`; on a CPU the
    CUDA-only tiers are reported skipped and left out."""
    cuda = device.type == "cuda"
    top = config.top_tier
    if top == "auto":
        top = "graph" if cuda else "eager_fp32"
    names = list(TIER_ORDER[TIER_ORDER.index(top) :])
    for name in names:
        precision = "fp32" if name == "eager_fp32" or not cuda else config.precision
        reports[name] = TierReport(name=name, precision=precision)
    if not cuda:
        for name in ("graph", "eager_half"):
            if name in names:
                names.remove(name)
                skip(reports[name], "needs CUDA (this runner is on the CPU)", logging.INFO)
    return names


def skip(report: TierReport, reason: str, level: int = logging.WARNING) -> None:
    report.state, report.reason = "skipped", reason
    log.log(level, "tier %s skipped: %s", report.name, reason)


@dataclass(frozen=True)
class ReferencePass:
    """Eager FP32's outputs on the parity examples, which every tier is checked against, and
    its median step time over them (the first step, which warms the model up, left out when
    there are others)."""

    outputs: list[list[np.ndarray]]
    step_s: float


def reference_at_start(path: StepPath, reference: Tier, examples: list[Example]) -> ReferencePass:
    """The reference pass; a PolicyError when the reference itself fails, since then no tier
    can serve the model."""
    times: list[float] = []
    try:
        outputs = reference_outputs(path, reference, examples, times)
        return ReferencePass(outputs, float(np.median(times[1:] or times)))
    except NonFiniteOutput as exc:
        raise PolicyError(str(exc)) from None
    except Exception as exc:
        raise PolicyError(
            "the model fails in eager FP32 (the reference), so no tier can serve it: "
            f"{first_line(exc)}"
        ) from exc


def start_tiers(
    path: StepPath,
    tiers: dict[str, Tier],
    reports: dict[str, TierReport],
    policy: TensorPolicy,
    config: RunnerConfig,
    observations: list[Example],
    reference: ReferencePass,
    say: Progress,
    phases: dict[str, float] | None = None,
) -> list[str]:
    """Start every tier in `tiers` (highest first); returns those that passed, in order. Raises
    PolicyError, with every tier's reason, when none did. An eager_fp32 tier that is a plain
    EagerTier computes exactly what the reference pass did, so that pass is its check (it
    would take as long again: seconds for pi0). Each tier's start-up time goes in `phases`."""
    for name, tier in tiers.items():
        report = reports[name]
        began = time.perf_counter()
        try:
            # With one observation the reference's only step is a cold one: no step time.
            if name == "eager_fp32" and isinstance(tier, EagerTier) and len(observations) > 1:
                reference_tier_ready(path, tier, report, policy, config, reference, say)
            else:
                start_tier(path, tier, report, policy, config, observations, reference.outputs, say)
        except Exception as exc:
            skip(report, first_line(exc))
            say(f"{name}: skipped: {report.reason}")
        if phases is not None:
            phases[name] = time.perf_counter() - began
    ready = [name for name in tiers if reports[name].state == "ready"]
    if not ready:
        reasons = "; ".join(f"{n}: {r.reason}" for n, r in reports.items())
        raise PolicyError(f"no inference tier passed its start-up checks ({reasons})")
    return ready if config.serve_slower_tiers else without_slower_tiers(ready, reports, say)


# A start-up median is a few steps on a possibly busy host: only a clear loss drops a tier,
# by a factor and by a margin a control period would notice.
SLOWER_FACTOR = 1.5
SLOWER_MARGIN_S = 0.002


def without_slower_tiers(
    ready: list[str], reports: dict[str, TierReport], say: Progress
) -> list[str]:
    """`ready` less each tier whose start-up step took more than SLOWER_FACTOR times (and
    SLOWER_MARGIN_S more than) a lower ready tier's: it would serve slower than its own fallback
    (inductor's code for a large model on a CPU can be), so it is marked skipped, said once, and
    the faster one serves."""
    kept = []
    for index, name in enumerate(ready):
        mine = reports[name].step_s
        below = [(s, n) for n in ready[index + 1 :] if (s := reports[n].step_s) is not None]
        if mine is not None and below:
            fastest_s, fastest = min(below)
            if mine > SLOWER_FACTOR * fastest_s and mine - fastest_s > SLOWER_MARGIN_S:
                skip(
                    reports[name],
                    f"{mine * 1e3:.1f} ms a step at start-up, slower than {fastest}'s "
                    f"{fastest_s * 1e3:.1f} ms, so {fastest} serves instead",
                )
                say(f"{name}: not served: {reports[name].reason}")
                continue
        kept.append(name)
    return kept


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
    report.parity_error, step_s = tier_parity(path, tier, policy, config, observations, references)
    parity = f"parity error {report.parity_error:.1e}"
    built_in = f", built in {report.build_s:.1f} s"
    ready(path, tier, report, policy, config, say, step_s, parity, built_in)


def reference_tier_ready(
    path: StepPath,
    tier: Tier,
    report: TierReport,
    policy: TensorPolicy,
    config: RunnerConfig,
    reference: ReferencePass,
    say: Progress,
) -> None:
    """Fill eager_fp32's report from the reference pass (parity error 0 by definition); a
    policy's own reference chunks are still checked."""
    report.build_s, report.parity_error = 0.0, 0.0
    ready(path, tier, report, policy, config, say, reference.step_s, "the reference itself", "")


def ready(
    path: StepPath,
    tier: Tier,
    report: TierReport,
    policy: TensorPolicy,
    config: RunnerConfig,
    say: Progress,
    step_s: float,
    parity: str,
    built: str,
) -> None:
    """The last start-up check (against the policy's own reference chunks, when it carries
    some), then the tier marked ready, with its step time, and said so."""
    report.step_s = step_s
    against = ""
    if policy.reference is not None:
        report.reference_error = reference_parity(path, tier, policy, config)
        against = f", {report.reference_error:.1e} against {policy.reference.source}"
    report.state = "ready"
    say(
        f"{report.name}: ready ({report.precision}, {parity}{against}, "
        f"{step_s * 1e3:.2f} ms/step{built})"
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


def repromote(
    ladder: ServingLadder,
    path: StepPath,
    reference: Tier,
    tiers: dict[str, Tier],
    policy: TensorPolicy,
    config: RunnerConfig,
    observations: list[Example],
) -> bool:
    """Give the ladder's tiers above the serving one a fresh parity check on `observations`;
    promote to the highest that passes. Returns whether the tier changed."""
    try:
        references = reference_outputs(path, reference, observations)
    except Exception as exc:
        log.warning("re-promotion skipped: the reference failed (%s)", first_line(exc))
        return False
    for name in ladder.candidates():
        try:
            error, _ = tier_parity(path, tiers[name], policy, config, observations, references)
        except Exception as exc:
            log.info("re-promotion to %s refused: %s", name, first_line(exc))
            continue
        ladder.promote(name, f"parity error {error:.1e}")
        return True
    return False
