"""`tempo profile compare CONFIG --rtc`: does real-time chunking pay on this machine? A flow,
pi0 or pi0.5 policy's configuration with RTC off against each RTC mode, in one process,
interleaved, with a verdict line per mode (by default exact, stop_grad, inpaint, and trained
for a pi0.5 checkpoint trained with training-time RTC).

    result = run_rtc_compare(config, iterations=200)
    print(render_rtc_compare(result))

Every variant is the same configuration with `policy.rtc.mode` set (off, exact, stop_grad,
inpaint, trained) and `execution.ensemble: newest`, built and started as the daemon would. A
round runs one window of control steps of each variant, the order rotating from round to round,
so drift falls on all alike; each variant is compared with RTC off exactly as `tempo profile
compare` compares B with A (ratio of medians, paired bootstrap over rounds, `min_effect`). Each
inference gets the robot's context as its session would give it: the plan still ahead as RTC's
prefix, and a delay of RTC_DELAY steps (the guided computation costs the same for every d).

The verdict line per mode: the overhead per control step with its interval, the policy step's
p50 and p99 against RTC off, and whether the p99 step still fits the execution horizon
(d = ceil(p99 / control period) <= s = execution.query_period), which RTC needs.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from controller.config import TempoConfig
from controller.observe.percentiles import summarize
from controller.tools.compare import (
    _Variant,
    paired_bootstrap,
    verdict,
    window_steps,
)
from controller.tools.profiling import Progress, observation_source, profiled_runner

log = logging.getLogger(__name__)

RTC_MODES = ("exact", "stop_grad", "inpaint")
RTC_DELAY = 2


@dataclass
class ModeResult:
    mode: str
    tier: str
    samples: np.ndarray  # seconds per control step, one per round
    predict: np.ndarray  # seconds per policy step
    ratio: float = float("nan")  # median(off) / median(mode): < 1 means the mode is slower
    ci: tuple[float, float] = (float("nan"), float("nan"))
    verdict: str = ""
    fits: bool | None = None
    delay_steps: int = 0
    startup_s: float = float("nan")  # building and starting its runner (compile included)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "tier": self.tier,
            "control_step": summarize(self.samples).as_dict(),
            "predict": summarize(self.predict).as_dict(),
            "throughput_steps_per_s": 1.0 / float(self.samples.mean()),
            "ratio_of_medians_off_over_mode": self.ratio,
            "ratio_ci": list(self.ci),
            "overhead": 1.0 / self.ratio - 1.0 if self.ratio == self.ratio else None,
            "delay_steps_p99": self.delay_steps,
            "fits_execution_horizon": self.fits,
            "verdict": self.verdict,
            "startup_s": self.startup_s,
        }


@dataclass
class RTCCompareResult:
    policy: str
    rounds: int
    window: int
    query_period: int
    control_hz: float
    confidence: float
    modes: list[ModeResult] = field(default_factory=list)  # off first

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "tempo-profile-compare-rtc",
            "policy": self.policy,
            "rounds": self.rounds,
            "window_steps": self.window,
            "query_period": self.query_period,
            "control_hz": self.control_hz,
            "confidence": self.confidence,
            "variants": [m.as_dict() for m in self.modes],
        }


def rtc_variant(config: TempoConfig, mode: str) -> TempoConfig:
    """`config` with policy.rtc.mode = `mode` and newest-chunk execution."""
    rtc = config.policy.section("rtc").model_copy(update={"mode": mode})
    policy = config.policy.with_section("rtc", rtc)
    inference = config.execution.model_copy(update={"ensemble": "newest"})
    return config.model_copy(update={"policy": policy, "execution": inference})


def default_modes(module: Any) -> tuple[str, ...]:
    """RTC_MODES, and trained where the served module (RTC off) is a pi0.5 step trained with
    training-time RTC."""
    from policies.pi0.rtc import trained_max_delay
    from policies.pi0.step import Pi0Step

    if isinstance(module, Pi0Step) and trained_max_delay(module) > 0:
        return (*RTC_MODES, "trained")
    return RTC_MODES


def run_rtc_compare(
    config: TempoConfig,
    iterations: int = 200,
    *,
    modes: tuple[str, ...] | None = None,
    replay: Path | None = None,
    warmup: int = 10,
    confidence: float = 0.95,
    min_effect: float = 0.02,
    progress: Progress | None = None,
    seed: int = 0,
) -> RTCCompareResult:
    """Start RTC off and every mode in `modes` (None: default_modes), then `iterations`
    rotating rounds."""
    if iterations < 2:
        raise ValueError("compare at least 2 rounds")
    say = progress or (lambda message: log.info("%s", message))
    variants: list[_Variant] = []
    startup: list[float] = []
    description = ""
    pending = ["off"]
    while pending:
        mode = pending.pop(0)
        variant_config = rtc_variant(config, mode)
        say(f"rtc {mode}: building and starting the runner")
        began = time.perf_counter()
        runner, description = profiled_runner(variant_config, None, say)
        startup.append(time.perf_counter() - began)
        say(f"rtc {mode}: serving from {runner.tier}, started in {startup[-1]:.1f} s")
        variant = _Variant(
            f"rtc {mode}",
            variant_config,
            runner,
            description,
            observation_source(runner, replay, seed),
        )
        variant.delay = RTC_DELAY
        variants.append(variant)
        if mode == "off":
            pending += list(modes or default_modes(runner.step_path.module))
    # The period the robot runs at: the checkpoint's (LeRobot's n_action_steps) unless the
    # config sets one, as resolved for the variants; the raw config's default is 1.
    period = variants[0].period
    window = window_steps(period, period)
    count = len(variants)
    for i in range(warmup):
        for k in range(count):
            variants[(i + k) % count].window(window, record=False)
    samples = np.zeros((count, iterations))
    say(f"measuring {iterations} rounds of {window} control step(s), {count} variants rotating")
    for i in range(iterations):
        for k in range(count):
            index = (i + k) % count
            samples[index, i] = variants[index].window(window, record=True)
    result = RTCCompareResult(
        policy=description,
        rounds=iterations,
        window=window,
        query_period=period,
        control_hz=config.control.rate_hz,
        confidence=confidence,
    )
    control_period = 1.0 / config.control.rate_hz
    off_predict = np.asarray(variants[0].predict)
    for index, variant in enumerate(variants):
        mode = variant.name.removeprefix("rtc ")
        predict = np.asarray(variant.predict)
        entry = ModeResult(mode, variant.runner.tier or "?", samples[index], predict)
        entry.startup_s = startup[index]
        entry.delay_steps = math.ceil(float(np.percentile(predict, 99)) / control_period)
        entry.fits = entry.delay_steps <= period
        if index > 0:
            entry.ratio, entry.ci = paired_bootstrap(
                samples[0], samples[index], "median", confidence, seed=seed
            )
            text, _ = verdict(entry.ratio, entry.ci, min_effect, confidence, f"rtc {mode}")
            entry.verdict = (
                f"{text}; policy step p50 {_ms(np.median(off_predict))} -> "
                f"{_ms(np.median(predict))}, p99 {_ms(np.percentile(off_predict, 99))} -> "
                f"{_ms(np.percentile(predict, 99))}; " + _fits(entry.delay_steps, period)
            )
        result.modes.append(entry)
    return result


def _fits(delay: int, horizon: int) -> str:
    if delay <= horizon:
        return f"fits: d = {delay} <= s = {horizon} steps"
    return f"does not fit: d = {delay} > s = {horizon} steps (raise execution.query_period)"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def render_rtc_compare(result: RTCCompareResult) -> str:
    lines = [
        f"policy   {result.policy}",
        f"{result.rounds} rounds, order rotating; one sample = {result.window} control step(s) "
        f"at {result.control_hz:g} Hz, a policy step every {result.query_period} "
        f"(execution horizon s)",
        "policy step = one inference, host to host (wall clock); ctrl = per control step, "
        "inference every s steps + ensembler + guards; start = building and starting the "
        "runner (compile included)",
        "",
        f"{'variant':<16}{'tier':<12}{'step mean':>13}{'step p50':>13}{'step p99':>13}"
        f"{'ctrl mean':>13}"
        f"{'steps/s':>9}{'overhead':>10}{'start':>9}",
    ]
    for m in result.modes:
        overhead = "-" if m.mode == "off" else f"{(1 / m.ratio - 1) * 100:+.1f}%"
        lines.append(
            f"{'rtc ' + m.mode:<16}{m.tier:<12}{_ms(float(m.predict.mean())):>13}"
            f"{_ms(float(np.median(m.predict))):>13}"
            f"{_ms(float(np.percentile(m.predict, 99))):>13}{_ms(float(m.samples.mean())):>13}"
            f"{1.0 / float(m.samples.mean()):>9.0f}{overhead:>10}{m.startup_s:>8.1f}s"
        )
    lines.append("")
    lines += [f"verdict rtc {m.mode}: {m.verdict}" for m in result.modes[1:]]
    return "\n".join(lines)
