"""Where one serving step's time goes on the GPU: host staging, upload, replay, download.

Builds ACT at ALOHA size through the runner (graph tier; the compile cache makes a restart fast),
then times each phase of `predict_chunk` with a synchronize after it, so phases do not overlap
here as they do when serving (the sum is an upper bound of the real step).

    python -m scripts.bench.profile_step [--cache-dir DIR] [--iters 300]
"""

from __future__ import annotations

import argparse
import time

import torch

from controller.inference.build import build_runner
from controller.inference.examples import random_observation
from controller.observe.percentiles import summarize
from controller.runner_config import RunnerConfig
from policies.base import window_context
from policies.demo import make_aloha_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--iters", type=int, default=300)
    args = parser.parse_args()
    runner = build_runner(make_aloha_policy(), RunnerConfig(cache_dir=args.cache_dir), "cuda")
    path, tier = runner.step_path, runner.serving_tier
    observations = [random_observation(runner.spec, seed) for seed in range(8)]
    phases: dict[str, list[float]] = {
        "upload (host+DMA)": [],
        "replay": [],
        "download": [],
        "predict_chunk": [],
    }
    sync = torch.cuda.synchronize
    for i in range(args.iters + 20):
        images, state = observations[i % len(observations)]
        t0 = time.perf_counter()
        path.upload(images, window_context(state))
        sync()
        t1 = time.perf_counter()
        with torch.no_grad(), path.on_stream():
            out = tier.run()
            sync()
            t2 = time.perf_counter()
            path.download.fetch(out)
        t3 = time.perf_counter()
        runner.predict_chunk(images, state)
        t4 = time.perf_counter()
        if i >= 20:
            for key, value in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                phases[key].append(value * 1e3)
    print(f"serving tier {runner.tier}; per-phase time with a synchronize after each (ms)")
    for key, values in phases.items():
        s = summarize(values)
        print(f"  {key:20s} p50 {s.p50:6.3f}   p99 {s.p99:6.3f}")


if __name__ == "__main__":
    main()
