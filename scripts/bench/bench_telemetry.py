"""What telemetry costs: a realistic step with and without it, measured in the same run.

    python -m scripts.bench.bench_telemetry [--rounds 2000] [--act-rounds 300]

1. Micro-benchmark: nanoseconds per operation (a section as a context manager, explicit
   start/stop, `lap` chains, a wrapped call, the shared no-op when telemetry is off, the one
   bool test an inline call site pays when off).
2. Realistic steps on the CPU (eager FP32), as the daemon does them for one robot and one
   observation per control step:
       decode the observation (receive) -> upload -> model -> download + check (inference)
       -> ensembler add_chunk + action_at -> guard chain -> encode the action (send)
   "off" is that code as it is; "on" adds the timing the wiring adds (receive and preprocess
   wrappers, mailbox_wait, inference, upload, model, postprocess, tick_lateness, ensembler,
   guards, send, tick, obs_to_action: 13 records), on the same objects. Off and on alternate,
   one step each, for --rounds rounds; the overhead is the ratio of means with a paired
   bootstrap 95% interval (controller.tools.compare.paired_bootstrap). The tick alone (receive,
   preprocess, ensembler, guards, send, no model) is measured the same way: it is the smallest
   step telemetry sits in. --act-rounds adds the demo ACT (11 M parameters) as the model.

   In context a record costs 2-3x what the micro-benchmark says (the model's work evicts the
   caches and the branch history the timing code would hit), so "predicted" (records x micro
   cost / step) is a lower bound; the measured column is the figure to quote.

Writes bench_telemetry.json under $OUT when that is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numpy as np

from controller.config import TempoConfig
from controller.daemon.service import pipeline_factory
from controller.inference.examples import random_observation
from controller.inference.output_download import OutputDownload
from controller.inference.step_path import StepPath
from controller.inference.tiers import EagerTier
from controller.observe.telemetry import (
    ENSEMBLER,
    GUARDS,
    INFERENCE,
    MAILBOX_WAIT,
    MODEL,
    OBS_TO_ACTION,
    POSTPROCESS,
    PREPROCESS,
    RECEIVE,
    SEND,
    TICK,
    TICK_LATENESS,
    UPLOAD,
    Telemetry,
)
from controller.runner_config import RunnerConfig
from controller.tools.compare import paired_bootstrap
from controller.wire.protocol import decode, encode
from policies.base import window_context
from policies.tensor_policy import TensorPolicy
from policies.tiny import build_tiny_policy

RECORDS_PER_STEP = 13


def micro(number: int) -> dict[str, float]:
    on = Telemetry()
    off = Telemetry(enabled=False)
    a, b = on.section("a"), on.section("b")
    noop = off.section("a")
    clock = time.perf_counter_ns

    def f() -> None:
        return None

    wrapped, unwrapped = a(f), noop(f)
    timed = False
    env = {
        "a": a,
        "b": b,
        "noop": noop,
        "clock": clock,
        "f": f,
        "wrapped": wrapped,
        "unwrapped": unwrapped,
        "timed": timed,
    }
    statements = {
        "empty statement (loop floor)": "pass",
        "clock read (perf_counter_ns)": "clock()",
        "Histogram.record_ns": "a.record_ns(123456)",
        "with section: (on)": "with a: pass",
        "t0 = clock(); section.stop(t0) (on)": "t0 = clock(); a.stop(t0)",
        "lap chain, per section (on)": "t = clock(); t = a.lap(t); t = b.lap(t)",
        "wrapped call minus plain call (on)": "wrapped()",
        "plain call": "f()",
        "with noop: (off, shared no-op)": "with noop: pass",
        "wrapped call (off: fn itself)": "unwrapped()",
        "if timed: ... (off, inline form)": "if timed: t0 = clock()",
    }
    out = {}
    for name, stmt in statements.items():
        best = min(timeit.repeat(stmt, globals=env, number=number, repeat=5))
        out[name] = best / number * 1e9
    out["lap chain, per section (on)"] = (
        out["lap chain, per section (on)"] - out["clock read (perf_counter_ns)"]
    ) / 2
    out["wrapped call minus plain call (on)"] -= out["plain call"]
    return out


class Step:
    """One control step for one robot, as the daemon runs it, with or without telemetry."""

    def __init__(
        self, telemetry: Telemetry, with_model: bool = True, policy: TensorPolicy | None = None
    ) -> None:
        policy = policy or build_tiny_policy()
        self.spec = spec = policy.spec
        config = TempoConfig()
        device = __import__("torch").device("cpu")
        self.path = StepPath(spec, policy.module, device, RunnerConfig(top_tier="eager_fp32"))
        self.tier = EagerTier("eager_fp32", self.path.module, self.path.staging, None)
        self.download = OutputDownload((spec.chunk_size, spec.action_dim), device)
        self.pipeline = pipeline_factory(spec, config)({})  # the robot's, as the daemon's
        images, state = random_observation(spec, 1)
        self.frames = encode(
            "obs",
            robot="r",
            seq=1,
            time_ns=0,
            fields={"session": "s"},
            arrays={**images, "state": state[0]},
        )
        self.frames = [bytes(f) if not isinstance(f, bytes) else f for f in self.frames]
        self.state = state
        self.with_model = with_model
        self.chunk = np.zeros((spec.chunk_size, spec.action_dim), dtype=np.float32)
        self.step = 0
        self.clock = telemetry.clock
        self.receive_timed = telemetry.section(RECEIVE)(self._decode)
        self.check_timed = telemetry.section(PREPROCESS)(self._check)
        names: tuple[str, ...] = (MAILBOX_WAIT, INFERENCE, UPLOAD, MODEL, POSTPROCESS)
        names += (TICK_LATENESS, ENSEMBLER)
        names += (GUARDS, SEND, TICK, OBS_TO_ACTION)
        self.s = {name: telemetry.section(name) for name in names}

    def _decode(self) -> Any:
        return decode(self.frames)

    def _check(self, message: Any) -> dict[str, np.ndarray]:
        """What ObservationChecker.check does: pick the frames, check the state."""
        images = {c.name: message.arrays[c.name] for c in self.spec.cameras}
        bool(np.isfinite(message.arrays["state"].astype(np.float32, copy=False)).all())
        return images

    def run(self, timed: bool) -> None:
        """One step; `timed` False runs the same objects without any timing code (what the
        wiring does when telemetry is off: wrapped calls are the plain function, inline
        timing is skipped by one bool test)."""
        import torch

        s, clock = self.s, self.clock
        message = self.receive_timed() if timed else self._decode()
        images = self.check_timed(message) if timed else self._check(message)
        if self.with_model:
            if timed:
                s[MAILBOX_WAIT].record_ns(1000)
                t0 = t = clock()
            self.path.upload(images, window_context(self.state))
            if timed:
                t = s[UPLOAD].lap(t)
            with torch.no_grad():
                out = self.tier.run()
            if timed:
                t = s[MODEL].lap(t)
            chunk = self.download.fetch(out)[0]
            bool(np.isfinite(chunk).all())
            if timed:
                t = s[POSTPROCESS].lap(t)
                s[INFERENCE].record_ns(t - t0)
        else:
            chunk = self.chunk
        # the tick
        if timed:
            s[TICK_LATENESS].record_ns(1500)
            tick = t = clock()
        step, pipeline = self.step, self.pipeline
        pipeline.on_observation(self.state[-1], None, time.monotonic_ns())
        pipeline.on_chunk(step, chunk, step)
        pipeline.propose(step)
        if timed:
            t = s[ENSEMBLER].lap(t)
        pipeline.check(time.monotonic_ns())
        pipeline.delivered()
        if timed:
            t = s[GUARDS].lap(t)
        encode(
            "action",
            robot="tempo",
            seq=step,
            time_ns=0,
            fields={"session": "s", "step": step, "obs_seq": 1, "deadline_ns": 0},
            arrays={"action": pipeline.command},
        )
        if timed:
            t = s[SEND].lap(t)
            s[TICK].record_ns(t - tick)
            s[OBS_TO_ACTION].record_ns(t - tick)
        self.step += 1


def measure(rounds: int, with_model: bool, policy: TensorPolicy | None = None) -> dict[str, Any]:
    # One set of objects for both, so that only the timing code differs (two separately built
    # models can differ by more than telemetry costs: memory layout, alignment).
    step = Step(Telemetry(), with_model, policy)
    for _ in range(50):
        step.run(False)
        step.run(True)
    clock = time.perf_counter_ns
    samples = {"off": np.zeros(rounds), "on": np.zeros(rounds)}
    for i in range(rounds):
        for name in ("off", "on") if i % 2 == 0 else ("on", "off"):
            began = clock()
            step.run(name == "on")
            samples[name][i] = (clock() - began) / 1e9
    ratio, (low, high) = paired_bootstrap(samples["on"], samples["off"], "mean")
    ratio_med, (mlow, mhigh) = paired_bootstrap(samples["on"], samples["off"], "median")
    return {
        "rounds": rounds,
        "off_mean_s": float(samples["off"].mean()),
        "on_mean_s": float(samples["on"].mean()),
        "off_p50_s": float(np.median(samples["off"])),
        "on_p50_s": float(np.median(samples["on"])),
        "overhead_mean": ratio - 1.0,
        "overhead_mean_ci": [low - 1.0, high - 1.0],
        "overhead_median": ratio_med - 1.0,
        "overhead_median_ci": [mlow - 1.0, mhigh - 1.0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--number", type=int, default=200_000, help="micro-benchmark loops")
    parser.add_argument(
        "--act-rounds",
        type=int,
        default=300,
        help="rounds with the demo ACT (11 M parameters, one 96x128 camera); 0 to skip",
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # the inference worker's view on a shared 2-core machine
    costs = micro(args.number)
    print("telemetry micro-benchmark (best of 5, ns per operation)")
    for name, ns in costs.items():
        print(f"  {name:<42}{ns:>8.0f} ns")
    per_record = costs["lap chain, per section (on)"]
    results = {"micro_ns": costs, "records_per_step": RECORDS_PER_STEP}
    print()
    print("realistic steps on the CPU, off and on interleaved (one round = one of each)")
    header = f"{'':<34}{'off mean':>11}{'on mean':>11}{'off p50':>11}{'on p50':>11}"
    print(header + f"{'overhead (mean, 95% CI)':>32}{'predicted':>11}")
    cases: list[tuple[str, bool, int, TensorPolicy | None]] = [
        ("tiny policy step + tick", True, args.rounds, None),
        ("tick alone (no model)", False, args.rounds, None),
    ]
    if args.act_rounds:
        from policies.demo import make_demo_policy

        cases.append(("demo ACT step + tick", True, args.act_rounds, make_demo_policy()))
    for label, with_model, rounds, policy in cases:
        r = measure(rounds, with_model, policy)
        records = RECORDS_PER_STEP if with_model else 8
        predicted = records * per_record / 1e9 / r["off_mean_s"]
        r["predicted_overhead"] = predicted
        results[label] = r
        lo, hi = r["overhead_mean_ci"]
        print(
            f"{label:<34}{r['off_mean_s'] * 1e6:>9.1f}us{r['on_mean_s'] * 1e6:>9.1f}us"
            f"{r['off_p50_s'] * 1e6:>9.1f}us{r['on_p50_s'] * 1e6:>9.1f}us"
            f"{r['overhead_mean'] * 100:>+10.2f}% [{lo * 100:+.2f}%, {hi * 100:+.2f}%]"
            f"{predicted * 100:>10.2f}%"
        )
    period = 1.0 / TempoConfig().control.rate_hz
    per_step = RECORDS_PER_STEP * per_record / 1e9
    print(
        f"\npredicted = records x measured cost per record / step time "
        f"({RECORDS_PER_STEP} records: {per_step * 1e6:.1f} us per control step, "
        f"{per_step / period * 100:.3f}% of the {period * 1e3:.0f} ms control period)"
    )
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "bench_telemetry.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
