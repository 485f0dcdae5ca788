"""pi0 and pi0.5 at the real size on a GPU: LeRobot's own policy against Tempo's tiers, in one
run, on a checkpoint LeRobot saved itself.

For each family: LeRobot's PI0Policy / PI05Policy is built (random weights, seeded; its `dtype`
bfloat16, as LeRobot serves it) with 3 cameras 224x224, a 48-token prompt (pi0.5: 200 with its
state), chunk 50 and 10 Euler steps; its `predict_action_chunk` (what `select_action` runs once
per chunk) is timed on preprocessed inputs, eager and, with --lerobot-compile, with its own
`compile_model` (torch.compile of sample_actions, its default mode max-autotune). Then the
policy is saved with `save_pretrained` and its processors, and `tempo bench` times every Tempo
tier on that directory in a fresh process (cold start, then a warm restart on the compile
cache), reporting each tier's step and the GPU memory held.

    python -m scripts.bench.bench_pi0                        # needs LeRobot (0.6+) and a GPU
    python -m scripts.bench.bench_pi0 --families pi0 --lerobot-compile --json out.json

Prints one table per family: LeRobot's rows, then Tempo's, with the speed-up over LeRobot's
eager step measured in the same run.
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

from controller.observe.percentiles import summarize
from scripts.parity.check_pi0_parity import (
    CAMERAS,
    STATE_SIZE,
    SentencePieceStandIn,
    build_lerobot,
    save_processors,
)


def lerobot_batch(policy: Any, seed: int = 0) -> dict[str, torch.Tensor]:
    """A preprocessed batch as LeRobot's processors hand it to the policy."""
    gen = torch.Generator().manual_seed(seed)
    length = policy.config.tokenizer_max_length
    batch = {
        f"observation.images.{name}": torch.rand(1, 3, 224, 224, generator=gen) for name in CAMERAS
    }
    batch["observation.state"] = torch.randn(1, STATE_SIZE, generator=gen)
    batch["observation.language.tokens"] = torch.randint(0, 257152, (1, length), generator=gen)
    mask = torch.zeros(1, length, dtype=torch.bool)
    mask[:, : min(length, 48)] = True
    batch["observation.language.attention_mask"] = mask
    return {k: v.cuda() for k, v in batch.items()}


def time_lerobot(policy: Any, iters: int, warmup: int) -> dict[str, Any]:
    batch = lerobot_batch(policy)
    times = []
    started = time.perf_counter()
    with torch.no_grad():
        for i in range(warmup + iters):
            torch.cuda.synchronize()
            began = time.perf_counter()
            policy.predict_action_chunk(batch)
            torch.cuda.synchronize()
            if i == 0:
                first_s = time.perf_counter() - started
            if i >= warmup:
                times.append(time.perf_counter() - began)
    summary = summarize([t * 1e3 for t in times])
    return {"p50_ms": summary.p50, "p99_ms": summary.p99, "first_call_s": first_s,
            "gpu_memory_gb": torch.cuda.max_memory_allocated() / 1e9}  # fmt: skip


def bench_family(family: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"family": family, "device": torch.cuda.get_device_name()}
    torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    policy = build_lerobot(family, "real", "bfloat16", "cuda", seed=0)
    row["lerobot_build_s"] = time.perf_counter() - began
    print(f"{family}: LeRobot built in {row['lerobot_build_s']:.1f} s; timing eager", flush=True)
    row["lerobot_eager"] = time_lerobot(policy, args.iters, args.warmup)
    directory = work / f"{family}_lerobot_real"
    policy.save_pretrained(directory)
    SentencePieceStandIn.vocab_size = 257152  # as large as the token table: Tempo checks it
    save_processors(policy, family, directory, seed=2)
    if args.lerobot_compile:
        print(f"{family}: LeRobot compile_model (its torch.compile) ...", flush=True)
        policy.model.sample_actions = torch.compile(
            policy.model.sample_actions, mode=args.lerobot_compile_mode
        )
        began = time.perf_counter()
        row["lerobot_compiled"] = time_lerobot(policy, args.iters, args.warmup)
        row["lerobot_compiled"]["mode"] = args.lerobot_compile_mode
        print(f"{family}: LeRobot compiled and timed in {time.perf_counter() - began:.0f} s",
              flush=True)  # fmt: skip
    del policy
    torch.cuda.empty_cache()
    if args.lerobot_only:
        return row
    out = work / f"{family}_tempo_bench.json"
    command = [sys.executable, "-m", "controller.tools.bench_policy", str(directory),
               "--device", "cuda", "--iters", str(args.iters), "--warmup", str(args.warmup),
               "--json", str(out), "--reference-weights", args.reference_weights]  # fmt: skip
    print(f"{family}: tempo bench ...", flush=True)
    subprocess.run(command, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    row["tempo"] = json.loads(out.read_text())
    return row


def print_rows(row: dict[str, Any]) -> None:
    eager = row["lerobot_eager"]["p50_ms"]
    where = row.get("device", "GPU")
    print(f"\n{row['family']}: one chunk (3 cameras 224x224, chunk 50, 10 steps), {where}")
    print(f"{'what':34s} {'p50 ms':>9s} {'p99 ms':>9s} {'x LeRobot eager':>16s}")
    for name in ("lerobot_eager", "lerobot_compiled"):
        if name in row:
            r = row[name]
            print(f"{name:34s} {r['p50_ms']:9.2f} {r['p99_ms']:9.2f} {eager / r['p50_ms']:16.1f}")
    if "tempo" not in row:
        return
    for tier, r in row["tempo"]["tiers"].items():
        step = r["step"]
        label = f"tempo {tier} ({r['precision']})"
        print(f"{label:34s} {step['median_ms']:9.2f} {step['p99_ms']:9.2f} "
              f"{eager / step['median_ms']:16.1f}")  # fmt: skip
    tempo = row["tempo"]
    print(f"tempo cold start {tempo['cold_start']['ready_s']:.1f} s; warm "
          f"{tempo.get('warm_start', {}).get('ready_s', float('nan')):.1f} s; GPU memory "
          f"{tempo.get('gpu_memory_gb')}; LeRobot eager memory "
          f"{row['lerobot_eager']['gpu_memory_gb']:.1f} GB")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="pi0,pi05")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lerobot-compile", action="store_true")
    parser.add_argument("--lerobot-compile-mode", default="max-autotune")
    parser.add_argument(
        "--reference-weights", choices=["device", "host"], default="device",
        help="Tempo's runner.reference_weights (host: the FP32 reference's weights off the GPU)",
    )  # fmt: skip
    parser.add_argument("--lerobot-only", action="store_true", help="time LeRobot alone")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", type=Path, help="where the saved directories go (else a temp)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tempo-bench-pi0-") as tmp:
        work = args.work or Path(tmp)
        for family in args.families.split(","):
            rows.append(bench_family(family, args, work))
            print_rows(rows[-1])
            if args.json:
                args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
