"""`tempo profile compare`: two configurations, one process, interleaved, with a verdict.

    result = run_compare(config_a, config_b, iterations=200, names=("eager", "compiled"))
    print(render_compare(result))     # ... "B (compiled) is faster by 3.1x (95% CI 2.9x-3.3x)"

What is measured: the control-step cost
---------------------------------------
Each variant runs what the daemon does per robot per control step, minus the socket: one
`predict_chunk` every `execution.query_period` steps (the chunk goes into the ensembler), and
every step the robot's action pipeline as the daemon runs it
(`controller.tools.profiling.timed_control_step`).
One sample is the wall time of a window of W consecutive control steps divided by W, with
W = lcm of the two query periods (at most 100; else the larger period), so a sample always
contains the same number of policy steps for each variant and "query period 1 vs 10" compares
the cost per control step that each setting really has. Policy-step (predict_chunk) times are
reported beside it.

Interleaving and statistics
---------------------------
Both runners are built and warmed up in this process, then run in rounds: one window of A and
one of B per round, the order alternating (AB, BA, AB, ...) so that neither always runs second
on a warm cache, and machine drift (other processes, clocks, thermals) falls on both alike.

The headline figure is the ratio of medians, median(A) / median(B): above 1, B is faster. Its
confidence interval is a paired percentile bootstrap over rounds: rounds are resampled with
replacement (keeping A and B of a round together, so drift stays cancelled), the ratio of
medians is recomputed 2000 times, and the interval is the central `confidence` share of those
(default 95%). The ratio of means and its interval (same bootstrap) are in the JSON.

Verdict: "B is faster by 3.1x" when the whole interval is above 1 and the ratio exceeds
1 + min_effect (default 2%); "slower" symmetrically, said as median(B) / median(A) with the
interval inverted to match ("B is slower by 2.3x (95% CI 2.0x-2.7x)"); otherwise "no significant
difference".
Differences under 2% are not reproducible on a shared machine, whatever the interval says.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np

from controller.config import TempoConfig
from controller.daemon.execution import resolve_execution
from controller.inference.runner import Runner
from controller.observe.percentiles import summarize
from controller.tools.compare_result import BOOTSTRAP_RESAMPLES, CompareResult, VariantResult
from controller.tools.profiling import (
    Progress,
    observation_source,
    profiled_runner,
    robot_pipeline,
    timed_control_step,
)
from controller.tools.replay import ObservationSource
from controller.tools.reports import write_compare_report
from policies.base import RobotContext
from policies.tensor_policy import TensorPolicy

log = logging.getLogger(__name__)

MAX_WINDOW = 100


class _Variant:
    def __init__(
        self,
        name: str,
        config: TempoConfig,
        runner: Runner,
        description: str,
        source: ObservationSource,
    ) -> None:
        self.name = name
        self.config = config
        self.runner = runner
        self.description = description
        self.source = source
        self.pipeline = robot_pipeline(config, runner.spec)
        self.execution, _ = resolve_execution(config.execution, runner.spec)
        self.period = self.execution.query_period
        self.delay = 0  # the inference delay in the contexts (RTC's d)
        # A policy that reads a prompt (pi0) gets its codec's example one: a tool has no task.
        self.prompt = runner.codec.example(0).prompt if runner.spec.prompt is not None else None
        self.step = 0
        self.predict: list[float] = []

    def window(self, steps: int, record: bool) -> float:
        """Run `steps` control steps; seconds per step."""
        clock = time.perf_counter
        runner, source = self.runner, self.source
        started = clock()
        for _ in range(steps):
            chunk = None
            images, state = source.next()
            if self.step % self.period == 0:
                # The robot's context as its session would give it: the plan still ahead
                # (real-time chunking guides toward it) and the delay (chunks land at once here).
                context = RobotContext(
                    step=self.step,
                    episode_start=self.step == 0,
                    state_history=state,
                    previous_plan=self.pipeline.plan(self.step),
                    inference_delay=self.delay,
                    prompt=self.prompt,
                )
                began = clock()
                chunk = runner.predict(images, context).actions
                if record:
                    self.predict.append(clock() - began)
            timed_control_step(self.pipeline, self.step, chunk, state[-1])
            self.step += 1
        return (clock() - started) / steps


def window_steps(period_a: int, period_b: int) -> int:
    """Steps per sample: lcm of the two query periods, or the larger one if the lcm is big."""
    lcm = period_a * period_b // math.gcd(period_a, period_b)
    return lcm if lcm <= MAX_WINDOW else max(period_a, period_b)


def paired_bootstrap(
    a: np.ndarray,
    b: np.ndarray,
    statistic: str = "median",
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, tuple[float, float]]:
    """stat(a) / stat(b) and its percentile-bootstrap interval, resampling pairs (a[i], b[i])."""
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError("paired samples: two 1-D arrays of the same length (at least 2)")
    reduce = np.median if statistic == "median" else np.mean
    ratio = float(reduce(a) / reduce(b))
    rng = np.random.default_rng(seed)
    index = rng.integers(0, a.size, size=(resamples, a.size))
    ratios = reduce(a[index], axis=1) / reduce(b[index], axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, (tail, 1.0 - tail))
    return ratio, (float(low), float(high))


def verdict(
    ratio: float, ci: tuple[float, float], min_effect: float, confidence: float, b_name: str = "B"
) -> tuple[str, str | None]:
    """The one-line verdict and which variant is faster ("A", "B" or None)."""
    interval = f"{confidence * 100:.0f}% CI {_times(ci[0])}-{_times(ci[1])}"
    if ci[0] > 1.0 and ratio >= 1.0 + min_effect:
        return f"{b_name} is faster by {_by(ratio)} ({interval}, ratio of medians A/B)", "B"
    if ci[1] < 1.0 and 1.0 / ratio >= 1.0 + min_effect:
        # Said as B/A, so the headline and its interval read the same way (both above 1).
        inverse = f"{confidence * 100:.0f}% CI {_times(1.0 / ci[1])}-{_times(1.0 / ci[0])}"
        return f"{b_name} is slower by {_by(1.0 / ratio)} ({inverse}, ratio of medians B/A)", "A"
    reason = (
        "the interval includes 1"
        if ci[0] <= 1.0 <= ci[1]
        else (f"below the {min_effect * 100:.0f}% threshold")
    )
    return (
        f"no significant difference (A/B ratio {ratio:.3f}, {interval}; {reason})",
        None,
    )


def _times(value: float) -> str:
    return f"{value:.3f}x" if value < 10 else f"{value:.1f}x"


def _by(ratio: float) -> str:
    return f"{ratio:.1f}x" if ratio >= 1.2 else f"{(ratio - 1) * 100:.1f}% ({ratio:.3f}x)"


def run_compare(
    config_a: TempoConfig,
    config_b: TempoConfig,
    iterations: int = 200,
    *,
    names: tuple[str, str] = ("A", "B"),
    replay: Path | None = None,
    warmup: int = 10,
    confidence: float = 0.95,
    min_effect: float = 0.02,
    policies: tuple[TensorPolicy | None, TensorPolicy | None] = (None, None),
    report_dir: Path | None = None,
    progress: Progress | None = None,
    seed: int = 0,
) -> CompareResult:
    """Build and start both configurations as the daemon would, then `iterations` interleaved
    rounds after `warmup` rounds (see the module docstring)."""
    if iterations < 2:
        raise ValueError("compare at least 2 rounds")
    if not 0.5 <= confidence < 1.0:
        raise ValueError("confidence must be within [0.5, 1)")
    say = progress or (lambda message: log.info("%s", message))
    variants = []
    for name, config, policy in zip(names, (config_a, config_b), policies, strict=True):
        say(f"{name}: building and starting the runner")
        runner, description = profiled_runner(config, policy, say)
        variants.append(
            _Variant(name, config, runner, description, observation_source(runner, replay, seed))
        )
    a, b = variants
    window = window_steps(a.period, b.period)
    for i in range(warmup):
        for v in (a, b) if i % 2 == 0 else (b, a):
            v.window(window, record=False)
    samples = {a.name: np.zeros(iterations), b.name: np.zeros(iterations)}
    say(f"measuring {iterations} rounds of {window} control step(s), A and B interleaved")
    for i in range(iterations):
        for v in (a, b) if i % 2 == 0 else (b, a):
            samples[v.name][i] = v.window(window, record=True)
    sa, sb = samples[a.name], samples[b.name]
    ratio, ci = paired_bootstrap(sa, sb, "median", confidence, seed=seed)
    ratio_mean, ci_mean = paired_bootstrap(sa, sb, "mean", confidence, seed=seed)
    text, faster = verdict(
        ratio, ci, min_effect, confidence, f"B ({b.name})" if b.name != "B" else "B"
    )

    def result_of(v: _Variant, s: np.ndarray) -> VariantResult:
        return VariantResult(
            name=v.name,
            policy=v.description,
            tier=v.runner.tier or "?",
            query_period=v.period,
            ensemble=v.execution.ensemble,
            samples=s,
            predict=np.asarray(v.predict),
            tiers=list(v.runner.status()["tiers"]),  # type: ignore[call-overload]
        )

    result = CompareResult(
        a=result_of(a, sa),
        b=result_of(b, sb),
        rounds=iterations,
        window=window,
        warmup=warmup,
        source=a.source.description,
        confidence=confidence,
        min_effect=min_effect,
        ratio_median=ratio,
        ci_median=ci,
        ratio_mean=ratio_mean,
        ci_mean=ci_mean,
        difference_median_s=float(np.median(sb) - np.median(sa)),
        verdict=text,
        faster=faster,
    )
    if report_dir is not None:
        result.report = write_compare_report(result, Path(report_dir))
    return result


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1e3:.3f} ms"


def render_compare(result: CompareResult) -> str:
    a, b = result.a, result.b
    lines = [
        f"A  {a.name}: {a.policy}; tier {a.tier}, query_period {a.query_period}, "
        f"ensemble {a.ensemble}",
        f"B  {b.name}: {b.policy}; tier {b.tier}, query_period {b.query_period}, "
        f"ensemble {b.ensemble}",
        f"{result.rounds} interleaved rounds (A B, B A, ...) after {result.warmup} warm-up; "
        f"one sample = {result.window} control step(s); observations {result.source}",
        "",
        "control step = predict_chunk every query_period steps + ensembler + guards, per step",
    ]
    width = 14
    header = f"{'':<22}{'A':>{width}}{'B':>{width}}{'B - A':>14}{'A / B':>10}"
    lines.append(header)
    sa, sb = summarize(a.samples).as_dict(), summarize(b.samples).as_dict()
    for key in ("mean", "p50", "p99", "max"):
        va, vb = float(sa[key] or 0.0), float(sb[key] or 0.0)
        ratio = va / vb if vb else float("nan")
        lines.append(
            f"{'  ' + key:<22}{_ms(va):>{width}}{_ms(vb):>{width}}"
            f"{(vb - va) * 1e3:>+11.3f} ms{ratio:>9.2f}x"
        )
    ta, tb = 1.0 / a.samples.mean(), 1.0 / b.samples.mean()
    lines.append(
        f"{'  throughput':<22}{ta:>{width - 7},.0f} step/s{tb:>{width - 7},.0f} step/s"
        f"{'':>14}{tb / ta:>9.2f}x"
    )
    pa, pb = summarize(a.predict).as_dict(), summarize(b.predict).as_dict()
    lines.append("policy step (predict_chunk), for reference")
    for key in ("p50", "p99"):
        pva, pvb = pa[key], pb[key]
        lines.append(f"{'  ' + key:<22}{_ms(pva):>{width}}{_ms(pvb):>{width}}")
    lines.append(f"{'  calls':<22}{pa['count'] or 0:>{width}}{pb['count'] or 0:>{width}}")
    lo, hi = result.ci_median
    lines += [
        "",
        f"ratio of medians A/B {result.ratio_median:.3f} "
        f"({result.confidence * 100:.0f}% CI {lo:.3f}-{hi:.3f}, paired bootstrap over rounds); "
        f"ratio of means {result.ratio_mean:.3f} "
        f"(CI {result.ci_mean[0]:.3f}-{result.ci_mean[1]:.3f})",
        f"verdict: {result.verdict}",
    ]
    return "\n".join(lines)
