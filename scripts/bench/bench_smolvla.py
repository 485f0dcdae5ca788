"""SmolVLA at the real size on a GPU: LeRobot's own SmolVLAPolicy against Tempo's tiers, in one
run, on a checkpoint LeRobot saved itself.

LeRobot's SmolVLAPolicy is built with random weights on SmolVLM2-500M's widths (the backbone's
Hugging Face config written locally, nothing downloaded: scripts/parity/smolvla_backbone), cut
to 16 layers, an expert of 0.75 width, 3 cameras 480x640 resized with padding to 512x512, a
6-entry state and action, chunk 50, 10 Euler steps, all of LeRobot's defaults. Its
`select_action` is timed as a user runs it, eager FP32, on preprocessed inputs with the action
queue emptied before each call (each call then computes a chunk: the chunk time), and with
--lerobot-compile under its own `compile_model` (torch.compile of sample_actions, mode
max-autotune by default). Then the policy is saved with `save_pretrained` and its processors,
and `tempo bench` (controller.tools.bench_policy) times every Tempo tier on that directory in
a fresh process (cold start, then a warm restart on the compile cache), reporting each tier's
step and the GPU memory held.

    PYTHONPATH=. python -m scripts.bench.bench_smolvla       # LeRobot 0.6.1 and a GPU
    PYTHONPATH=. python -m scripts.bench.bench_smolvla --lerobot-compile --json out.json

LeRobot 0.6.1's SmolVLA needs the transformers it pins (>= 5.4, < 5.6): with 5.24 its denoising
loop fails in DynamicCache.crop. Prints LeRobot's rows, then Tempo's, with the speed-up over
LeRobot's eager chunk measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from scripts.parity.smolvla_backbone import make_hub_cache, patch_processor

CAMERAS = ((480, 640),) * 3
STATE, ACTION = 6, 6


def lerobot_batch(policy: Any, pre: Any, seed: int = 0) -> dict[str, Any]:
    """A preprocessed batch: 3 frames in [0, 1], a state, a task through LeRobot's tokenizer."""
    gen = torch.Generator().manual_seed(seed)
    raw: dict[str, Any] = {
        f"observation.images.cam{i}": torch.rand(1, 3, h, w, generator=gen)
        for i, (h, w) in enumerate(CAMERAS)
    }
    raw["observation.state"] = torch.randn(1, STATE, generator=gen)
    raw["task"] = ["pick up the red cube and put it in the box"]
    return pre({k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in raw.items()})


def time_lerobot(policy: Any, batch: dict[str, Any], iters: int, warmup: int) -> dict[str, Any]:
    from controller.observe.percentiles import summarize

    times, first_s = [], 0.0
    started = time.perf_counter()
    with torch.no_grad():
        for i in range(warmup + iters):
            policy.reset()  # an empty queue: this call computes a chunk
            torch.cuda.synchronize()
            began = time.perf_counter()
            policy.select_action(dict(batch))
            torch.cuda.synchronize()
            if i == 0:
                first_s = time.perf_counter() - started
            if i >= warmup:
                times.append(time.perf_counter() - began)
    summary = summarize([t * 1e3 for t in times])
    return {"p50_ms": summary.p50, "p99_ms": summary.p99, "first_call_s": first_s,
            "gpu_memory_gb": torch.cuda.max_memory_allocated() / 1e9}  # fmt: skip


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from scripts.parity.check_smolvla_parity import Case, build_lerobot

    row: dict[str, Any] = {"device": torch.cuda.get_device_name()}
    torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    case = Case("real size", cameras=CAMERAS, state_dim=STATE, action_dim=ACTION)
    policy, pre, post, _ = build_lerobot(case, 0, "cuda")
    row["lerobot_build_s"] = time.perf_counter() - began
    print(f"LeRobot SmolVLA built in {row['lerobot_build_s']:.1f} s; timing eager", flush=True)
    batch = lerobot_batch(policy, pre)
    row["lerobot_eager"] = time_lerobot(policy, batch, args.iters, args.warmup)
    directory = work / "smolvla_lerobot_real"
    policy.save_pretrained(directory)
    pre.save_pretrained(directory)
    post.save_pretrained(directory)
    if args.lerobot_compile:
        print("LeRobot compile_model (its torch.compile) ...", flush=True)
        policy.model.sample_actions = torch.compile(
            policy.model.sample_actions, mode=args.lerobot_compile_mode
        )
        row["lerobot_compiled"] = time_lerobot(policy, batch, args.iters, args.warmup)
        row["lerobot_compiled"]["mode"] = args.lerobot_compile_mode
    del policy
    torch.cuda.empty_cache()
    if args.lerobot_only:
        return row
    out = work / "smolvla_tempo_bench.json"
    command = [sys.executable, "-m", "controller.tools.bench_policy", str(directory),
               "--device", "cuda", "--iters", str(args.iters), "--warmup", str(args.warmup),
               "--json", str(out)]  # fmt: skip
    print("tempo bench ...", flush=True)
    subprocess.run(command, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    row["tempo"] = json.loads(out.read_text())
    return row


def print_rows(row: dict[str, Any]) -> None:
    eager = row["lerobot_eager"]["p50_ms"]
    print(
        f"\nSmolVLA: one chunk (3 cameras 480x640 -> 512x512, chunk 50, 10 steps), {row['device']}"
    )
    print(f"{'what':40s} {'p50 ms':>9s} {'p99 ms':>9s} {'x LeRobot eager':>16s}")
    for name in ("lerobot_eager", "lerobot_compiled"):
        if name in row:
            r = row[name]
            print(f"{name:40s} {r['p50_ms']:9.2f} {r['p99_ms']:9.2f} {eager / r['p50_ms']:16.1f}")
    if "tempo" not in row:
        return
    for tier, r in row["tempo"]["tiers"].items():
        step = r["step"]
        label = f"tempo {tier} ({r['precision']})"
        print(f"{label:40s} {step['median_ms']:9.2f} {step['p99_ms']:9.2f} "
              f"{eager / step['median_ms']:16.1f}")  # fmt: skip
    tempo = row["tempo"]
    print(f"tempo cold start {tempo['cold_start']['ready_s']:.1f} s; warm "
          f"{tempo.get('warm_start', {}).get('ready_s', float('nan')):.1f} s; GPU memory "
          f"{tempo.get('gpu_memory_gb')}; LeRobot eager memory "
          f"{row['lerobot_eager']['gpu_memory_gb']:.1f} GB")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lerobot-compile", action="store_true")
    parser.add_argument("--lerobot-compile-mode", default="max-autotune")
    parser.add_argument("--lerobot-only", action="store_true", help="time LeRobot alone")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", type=Path, help="where the saved directory goes (else a temp)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_smolvla needs a CUDA GPU")
        return 2
    with tempfile.TemporaryDirectory(prefix="tempo-bench-smolvla-") as tmp:
        make_hub_cache(Path(tmp) / "hub", real_size=True)  # before LeRobot imports the Hub
        patch_processor()
        row = bench(args, args.work or Path(tmp))
        print_rows(row)
        if args.json:
            args.json.write_text(json.dumps(row, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
