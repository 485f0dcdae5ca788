"""Diffusion Policy at the real sizes on a GPU: LeRobot's own `select_action` against Tempo's
tiers, in one run, on the weights LeRobot saved itself.

Cases: PushT's config (one camera 96x96 cropped to 84x84, group norm, state 2, action 2, 2
observation steps, horizon 16, 8 actions played) and an ALOHA-sized one (3 cameras 480x640,
state and action 14, 2 observation steps, horizon 64, 32 played: LeRobot's defaults), each with
DDPM 100 steps (LeRobot's default: num_inference_steps unset) and DDIM 10. The U-Net is
LeRobot's default (widths 512, 1024, 2048, kernel 5), the backbone a ResNet-18; random weights.

With LeRobot importable (lerobot 0.6 and diffusers): its DiffusionPolicy is built on the GPU,
its `select_action` is called as a control loop calls it (n_action_steps calls per chunk, on
inputs its preprocessor made) and the calls that compute a chunk are timed, eager and, unless
--no-lerobot-compile, with its own compile mode (`compile_model`: torch.compile of the U-Net,
mode reduce-overhead); then the policy is saved with `save_pretrained` and its processors, and
`tempo bench` (controller.tools.bench_policy) times every Tempo tier on that directory in a
fresh process. Without LeRobot the same configs are written as Tempo checkpoints (random
weights) and only Tempo's tiers are timed; the table says so.

    python -m scripts.bench.bench_diffusion                          # all four cases
    python -m scripts.bench.bench_diffusion --cases pusht-ddpm100,pusht-ddim10 --json out.json

Prints one table per case: LeRobot's rows, then Tempo's (the full step: host frames in, chunk
out; and the model alone on the GPU), with the speed-up over LeRobot's eager chunk measured in
the same run, and the goals (H200: DDPM 100 p50 <= 25 ms, DDIM 10 <= 4 ms, >= 10x LeRobot).
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

CONFIGS: dict[str, dict[str, Any]] = {
    "pusht": dict(
        cameras=1, height=96, width=96, state=2, action=2,
        options=dict(crop_shape=(84, 84), use_group_norm=True, n_obs_steps=2, horizon=16,
                     n_action_steps=8),
    ),
    "aloha": dict(
        cameras=3, height=480, width=640, state=14, action=14,
        options=dict(n_obs_steps=2, horizon=64, n_action_steps=32),
    ),
}  # fmt: skip
SCHEDULERS: dict[str, dict[str, Any]] = {
    "ddpm100": dict(noise_scheduler_type="DDPM", num_inference_steps=None),
    "ddim10": dict(noise_scheduler_type="DDIM", num_inference_steps=10),
}
GOALS_MS = {"ddpm100": 25.0, "ddim10": 4.0}  # H200, the graph tier's whole step
GOAL_SPEEDUP = 10.0


def lerobot_available() -> bool:
    try:
        import diffusers  # noqa: F401
        import lerobot  # noqa: F401
    except ImportError:
        return False
    return True


def camera_names(count: int) -> list[str]:
    return [f"cam{i}" for i in range(count)]


def build_lerobot(
    case: dict[str, Any], scheduler: dict[str, Any], compile_model: bool, device: str = "cuda"
) -> Any:
    """LeRobot's DiffusionPolicy on `device` (random weights, seeded) and its processors."""
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.diffusion.processor_diffusion import (
        make_diffusion_pre_post_processors,
    )

    torch.manual_seed(0)
    shape = (3, case["height"], case["width"])
    inputs = {
        f"observation.images.{name}": PolicyFeature(type=FeatureType.VISUAL, shape=shape)
        for name in camera_names(case["cameras"])
    }
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(case["state"],))
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(case["action"],))}
    mapping = {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"}
    config = DiffusionConfig(
        input_features=inputs,
        output_features=outputs,
        normalization_mapping={k: NormalizationMode(v) for k, v in mapping.items()},
        device=device,
        pretrained_backbone_weights=None,
        push_to_hub=False,
        compile_model=compile_model,
        **case["options"],
        **scheduler,
    )
    stats: dict[str, dict[str, torch.Tensor]] = {}
    for key, feature in {**inputs, **outputs}.items():
        size = feature.shape[0]
        view = (size, 1, 1) if len(feature.shape) == 3 else (size,)
        stats[key] = {
            "mean": torch.full(view, 0.45), "std": torch.full(view, 0.25),
            "min": -torch.ones(view), "max": torch.ones(view),
        }  # fmt: skip
    policy = DiffusionPolicy(config).to(device).eval()
    processors = make_diffusion_pre_post_processors(config, dataset_stats=stats)
    return policy, processors


def time_select_action(policy: Any, preprocessor: Any, case: dict[str, Any], chunks: int,
                       warmup: int) -> dict[str, Any]:  # fmt: skip
    """The select_action calls that compute a chunk (one in n_action_steps), timed."""
    gen = torch.Generator().manual_seed(1)
    raw = {
        f"observation.images.{name}": torch.rand(1, 3, case["height"], case["width"], generator=gen)
        for name in camera_names(case["cameras"])
    }
    raw["observation.state"] = torch.rand(1, case["state"], generator=gen) * 2 - 1
    batch = preprocessor(raw)
    n_action_steps = policy.config.n_action_steps
    policy.reset()
    times = []
    started = time.perf_counter()
    first_s = 0.0
    with torch.no_grad():
        for chunk in range(warmup + chunks):
            for call in range(n_action_steps):
                sync()
                began = time.perf_counter()
                policy.select_action(dict(batch))
                sync()
                if chunk == 0 and call == 0:
                    first_s = time.perf_counter() - started
                if call == 0 and chunk >= warmup:
                    times.append(time.perf_counter() - began)
    summary = summarize([t * 1e3 for t in times])
    memory = torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else None
    return {"p50_ms": summary.p50, "p99_ms": summary.p99, "first_call_s": first_s,
            "gpu_memory_gb": memory}  # fmt: skip


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def tempo_checkpoint(case: dict[str, Any], scheduler: dict[str, Any], directory: Path) -> Path:
    """The case as a Tempo checkpoint with random weights (no LeRobot here)."""
    from policies.checkpoints.tempo_format import save_checkpoint
    from policies.diffusion.config import DiffusionConfig
    from policies.diffusion.demo import make_diffusion_policy

    config = DiffusionConfig(
        n_cameras=case["cameras"], image_height=case["height"], image_width=case["width"],
        state_dim=case["state"], action_dim=case["action"], **case["options"], **scheduler,
    )  # fmt: skip
    return save_checkpoint(directory, make_diffusion_policy(config, camera_names(case["cameras"])))


def bench_case(name: str, args: argparse.Namespace, work: Path, with_lerobot: bool) -> dict:
    config_name, scheduler_name = name.split("-")
    case, scheduler = CONFIGS[config_name], SCHEDULERS[scheduler_name]
    row: dict[str, Any] = {"case": name, "device": torch.cuda.get_device_name()}
    directory = work / name
    if with_lerobot:
        torch.cuda.reset_peak_memory_stats()
        policy, (preprocessor, postprocessor) = build_lerobot(case, scheduler, False)
        print(f"{name}: timing LeRobot select_action, eager", flush=True)
        row["lerobot_eager"] = time_select_action(policy, preprocessor, case, args.chunks, 2)
        policy.save_pretrained(directory)
        preprocessor.save_pretrained(directory)
        postprocessor.save_pretrained(directory)
        del policy
        if args.lerobot_compile:
            print(f"{name}: LeRobot compile_model (torch.compile of its U-Net) ...", flush=True)
            compiled, (preprocessor, _) = build_lerobot(case, scheduler, True)
            row["lerobot_compiled"] = time_select_action(
                compiled, preprocessor, case, args.chunks, 3
            )
            del compiled
        torch.cuda.empty_cache()
    else:
        tempo_checkpoint(case, scheduler, directory)
    out = work / f"{name}_tempo.json"
    command = [sys.executable, "-m", "controller.tools.bench_policy", str(directory),
               "--device", "cuda", "--iters", str(args.iters), "--warmup", str(args.warmup),
               "--json", str(out), "--no-warm-start"]  # fmt: skip
    print(f"{name}: tempo bench ...", flush=True)
    subprocess.run(command, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    row["tempo"] = json.loads(out.read_text())
    return row


def print_rows(row: dict[str, Any]) -> None:
    name = row["case"]
    scheduler = name.split("-")[1]
    eager = row.get("lerobot_eager", {}).get("p50_ms")
    print(f"\n{name}: one chunk, {row['device']}")
    print(f"{'what':36s} {'p50 ms':>9s} {'p99 ms':>9s} {'x LeRobot eager':>16s}")

    def ratio(ms: float) -> str:
        return f"{eager / ms:16.1f}" if eager else f"{'-':>16s}"

    for key, label in (("lerobot_eager", "LeRobot select_action eager FP32"),
                       ("lerobot_compiled", "LeRobot compile_model")):  # fmt: skip
        if key in row:
            r = row[key]
            print(f"{label:36s} {r['p50_ms']:9.2f} {r['p99_ms']:9.2f} {ratio(r['p50_ms'])}")
    if eager is None:
        print("(LeRobot is not importable here: Tempo's tiers alone, no baseline)")
    tiers = row["tempo"]["tiers"]
    for tier, r in tiers.items():
        step, device = r["step"], r["device"]
        label = f"Tempo {tier} ({r['precision']}), whole step"
        print(f"{label:36s} {step['median_ms']:9.2f} {step['p99_ms']:9.2f} "
              f"{ratio(step['median_ms'])}")  # fmt: skip
        label = f"Tempo {tier}, model alone (GPU)"
        print(f"{label:36s} {device['median_ms']:9.2f} {device['p99_ms']:9.2f}")
    tempo = row["tempo"]
    print(f"Tempo start {tempo['cold_start']['ready_s']:.1f} s (cold cache); GPU memory "
          f"{tempo.get('gpu_memory_gb')}")  # fmt: skip
    if "graph" in tiers:
        p50 = tiers["graph"]["step"]["median_ms"]
        verdict = f"graph p50 {p50:.2f} ms against the goal {GOALS_MS[scheduler]:g} ms"
        if eager:
            verdict += f", {eager / p50:.1f}x LeRobot eager (goal {GOAL_SPEEDUP:g}x)"
        print(f"goal (H200): {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    every = [f"{c}-{s}" for c in CONFIGS for s in SCHEDULERS]
    parser.add_argument("--cases", default=",".join(every), help=f"of {', '.join(every)}")
    parser.add_argument("--iters", type=int, default=50, help="Tempo's timed steps per tier")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=10, help="LeRobot's timed chunks")
    parser.add_argument("--no-lerobot-compile", dest="lerobot_compile", action="store_false")
    parser.add_argument("--tempo-only", action="store_true", help="skip LeRobot even if present")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", type=Path, help="where the checkpoints go (else a temp dir)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark times GPU tiers; run it on a GPU machine")
        return 2
    with_lerobot = not args.tempo_only and lerobot_available()
    if not with_lerobot:
        print("LeRobot (lerobot 0.6 and diffusers) is not importable here"
              + (" or --tempo-only" if args.tempo_only else "")
              + ": timing Tempo's tiers alone, without LeRobot's baseline", flush=True)  # fmt: skip
    cases = args.cases.split(",")
    unknown = sorted(set(cases) - set(every))
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(every)}")
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="tempo-bench-diffusion-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in cases:
            rows.append(bench_case(name, args, work, with_lerobot))
            print_rows(rows[-1])
            if args.json:
                args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
