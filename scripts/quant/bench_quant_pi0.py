"""W4A8 DuQuant pi0 against the BF16 pi0, per GEMM shape and for the whole step, in one run.

    python -m scripts.quant.bench_quant_pi0 --device cuda            # real-size pi0, random weights
    python -m scripts.quant.bench_quant_pi0 --tiny --device cpu      # tiny widths: checks it runs
    python -m scripts.quant.bench_quant_pi0 --json out.json          # the numbers as JSON too

1. Per layer shape (the Gemma prefix's GEMMs at its token count, 3 cameras x 256 + the prompt
   = 816 tokens for pi0: 2048 -> 2048 / 256 / 16384, 16384 -> 2048; the expert's at the chunk's
   tokens): one layer, compiled and captured in a CUDA graph on a GPU (compiled on a CPU),
   BF16 nn.Linear (the baseline, timed in the same run) against QuantLinear with each compute
   path: int8 (torch._int_mm), fused (the same integers in Tempo's Triton kernels, also with the
   weights packed two codes a byte; where triton runs) and dequant (weights dequantized to BF16
   in forward). Weight bytes:
   packed 4-bit codes and scales against BF16. Measured by quant_pi0_shapes.py (beside it).
2. The whole step through Tempo's tier ladder: the FP32 model served by its graph tier in BF16
   (the baseline) against the W4A8 model (int8, fused, dequant) served the same way, each tier's
   action error against the FP32 model (reference chunks) and the W4A8 model's memory.

The model is built on the meta device and materialized with seeded random weights on the
device (no minutes-long host initialisation); calibration runs there too (`--observations`
random observations with random prompts).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from controller.inference.build import build_runner, resolve_device
from controller.inference.examples import random_example
from controller.runner_config import RunnerConfig
from controller.tools.bench_policy import percentiles_ms
from controller.tools.quantize import run_policy
from policies.base import CameraSpec, PolicySpec
from policies.pi0.config import Pi0Config, tiny_pi0_config
from policies.pi0.gemma import HostTable
from policies.pi0.policy import pi0_policy
from policies.pi0.quantized import PI0_TARGET
from policies.pi0.step import Pi0Step, Pi0StepConfig
from policies.quant.apply import quantize_module
from policies.quant.config import ComputePath, QuantSettings
from policies.quant.layer import QuantLinear, memory_bytes
from policies.tensor_policy import ReferenceChunks, TensorPolicy
from scripts.measure import relative_error
from scripts.quant.quant_pi0_shapes import bench_shapes, compute_paths, shape_line

log = logging.getLogger("bench_quant_pi0")
CAMERAS, STATE, JOINTS = 3, 14, 7


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--tiny", action="store_true", help="tiny widths (a CPU run in minutes)")
    parser.add_argument("--iters", type=int, default=100, help="timed replays per measurement")
    parser.add_argument("--observations", type=int, default=4, help="calibration observations")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--rotation-steps", type=int, default=8)
    parser.add_argument(
        "--vision", action="store_true", help="quantize the vision tower's layers too"
    )
    parser.add_argument(
        "--skip-step", action="store_true", help="per-shape GEMMs only, not the whole step"
    )
    parser.add_argument("--json", dest="json_out", type=Path, help="write the results here")
    return parser.parse_args()


# ---- the model ----------------------------------------------------------------------------------


def network_config(tiny: bool) -> Pi0Config:
    if tiny:
        return tiny_pi0_config(tokenizer_max_length=16, chunk_size=10, num_inference_steps=3)
    # LeRobot's pi0: gemma_2b + gemma_300m (the variants' widths), 224x224 images.
    return Pi0Config.model_validate({"tokenizer_max_length": 48})


def random_pi0(config: Pi0Config, device: torch.device, seed: int = 0) -> TensorPolicy:
    """pi0 of `config` on `device` with seeded random weights: built on the meta device,
    materialized there uninitialised, then filled (matrices N(0, 1/fan_in), vectors zero, the
    normalization identity)."""
    size = config.vision.image_size
    step_config = Pi0StepConfig(
        network=config,
        state_size=STATE,
        action_size=JOINTS,
        camera_sizes=((size, size),) * CAMERAS,
    )
    with torch.device("meta"):
        step = Pi0Step(step_config)
    step.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for table in step.modules():  # the vocabulary tables stay on the host (HostTable)
            if isinstance(table, HostTable):
                rows, cols = table.weight.shape
                table.weight = nn.Parameter(torch.randn(rows, cols) * cols**-0.5, False)
        for param in step.parameters():
            if param.device.type != device.type:  # the host tables; "cuda" != "cuda:0"
                continue
            if param.dim() >= 2:
                fan_in = math.prod(param.shape[1:])
                param.normal_(0.0, fan_in**-0.5, generator=gen)
            else:
                param.zero_()
        step.state_norm.center.zero_()
        step.state_norm.scale.fill_(1.0)
        step.action_norm.center.zero_()
        step.action_norm.scale.fill_(1.0)
    step.network.reset_buffers()
    cameras = tuple(CameraSpec(name=f"camera_{i}", height=size, width=size) for i in range(CAMERAS))
    spec = PolicySpec(
        cameras=cameras,
        state_size=STATE,
        joint_names=tuple(f"joint_{i}" for i in range(JOINTS)),
        chunk_size=config.chunk_size,
    )
    return pi0_policy(step.eval(), spec)


def random_examples(policy: TensorPolicy, count: int, seed: int) -> list[Any]:
    return [random_example(policy.spec, policy.inputs, seed + i) for i in range(count)]


def eager_chunks(policy: TensorPolicy, examples: list[Any], device: torch.device) -> np.ndarray:
    from policies.tensor_policy import EagerPolicy

    eager = EagerPolicy(policy, device)
    with torch.no_grad():
        return np.stack([eager.predict(images, context).actions for images, context in examples])


# ---- the whole step ----------------------------------------------------------------------------


def serve(policy: TensorPolicy, device: str, cache: Path) -> tuple[Any, float]:
    config = RunnerConfig(
        top_tier="graph" if device == "cuda" else "compiled",
        compile_backend="inductor" if device == "cuda" else "eager",
        precision="bf16",
        cache_dir=cache,
        step_budget_ms=None,
        parity_observations=2,
        parity_rtol=1.0,  # measured and printed here, not enforced
        reference_parity_rtol=10.0,
    )
    began = time.perf_counter()
    runner = build_runner(policy, config, device)
    return runner, time.perf_counter() - began


def time_top_tier(runner: Any, policy: TensorPolicy, iters: int) -> dict[str, Any]:
    top = runner.ready_tiers[0]
    runner.use_tier(top)
    for images, context in random_examples(policy, 5, 500):
        runner.predict(images, context)
    report = {t["name"]: t for t in runner.status()["tiers"]}[top]
    return {
        "tier": top,
        "precision": report["precision"],
        "model": percentiles_ms(runner.time_device(top, iters)),
        "parity_error": report["parity_error"],
        "reference_error": report["reference_error"],
    }


def bench_step(
    config: Pi0Config, device: str, settings: QuantSettings, args: argparse.Namespace
) -> dict[str, Any]:
    torch_device = torch.device(device)
    policy = random_pi0(config, torch_device)
    # Context step 0: the noise the runner's start-up check draws for reference chunks.
    examples = [(im, replace(ctx, step=0)) for im, ctx in random_examples(policy, 3, 22_000)]
    chunks = eager_chunks(policy, examples, torch_device)
    policy.reference = ReferenceChunks(
        images=np.stack([[im[c.name] for c in policy.spec.cameras] for im, _ in examples]),
        state=np.stack([ctx.state_history for _, ctx in examples]),
        chunks=chunks,
        prompts=tuple(ctx.prompt for _, ctx in examples),
    )
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as cache:
        runner, start_s = serve(policy, device, Path(cache) / "bf16")
        out["bf16"] = time_top_tier(runner, policy, args.iters) | {"start_s": start_s}
        del runner
        calibration = random_examples(policy, args.observations, 11_000)
        began = time.perf_counter()

        def run_calibration() -> None:
            for images, context in calibration:
                observation = (
                    np.stack([[images[c.name] for c in policy.spec.cameras]]),
                    context.state_history[None],
                    (context.prompt,),
                )
                run_policy(policy, observation, torch_device)

        quantize_module(policy.module, settings, run_calibration, PI0_TARGET)
        out["calibration_s"] = time.perf_counter() - began
        memory = memory_bytes(policy.module)
        out["memory_vs_fp16"] = {k: v / memory["fp16"] for k, v in memory.items()}
        out["model_bytes"] = model_bytes(policy.module)
        fake_quant = eager_chunks(policy, examples, torch_device)
        out["fake_quant_error"] = max(
            relative_error(q, r) for q, r in zip(fake_quant, chunks, strict=True)
        )
        for path in [p for p in compute_paths(torch_device) if p != "fused packed"]:
            for layer in policy.module.modules():
                if isinstance(layer, QuantLinear):
                    layer.compiled_path = cast(ComputePath, path)  # "fused packed" is left out
            torch._dynamo.reset()
            runner, start_s = serve(policy, device, Path(cache) / path)
            out[f"w4a8 {path}"] = time_top_tier(runner, policy, args.iters) | {"start_s": start_s}
            del runner
    return out


def model_bytes(module: nn.Module) -> dict[str, int]:
    """Bytes of the whole model's weights: BF16 everywhere, against the quantized layers packed
    (4-bit codes, FP32 scales and transforms) and the rest in BF16; and how many of those bytes
    are the vocabulary tables, which stay in host memory (HostTable), not on the GPU."""
    quantized = {id(t) for m in module.modules() if isinstance(m, QuantLinear) for t in m.buffers()}
    rest = sum(
        t.numel() * 2
        for t in (*module.parameters(), *module.buffers())
        if id(t) not in quantized and t.is_floating_point()
    )
    layers = [m for m in module.modules() if isinstance(m, QuantLinear)]
    bf16 = rest + sum(m.in_features * m.out_features * 2 for m in layers)
    packed = rest
    for m in layers:
        packed += m.out_padded * m.width // 2 + m.out_padded * 4
        for name in ("rot_in", "perm", "rot_mix", "out_rot", "act_scale", "bias"):
            t = getattr(m, name)
            packed += 0 if t is None else t.numel() * t.element_size()
    host = sum(m.weight.numel() * 2 for m in module.modules() if isinstance(m, HostTable))
    return {"bf16": bf16, "w4a8_packed": packed, "host_tables": host}


# ---- output ------------------------------------------------------------------------------------


def print_report(report: dict[str, Any]) -> None:
    print(f"\n{report['model']} on {report.get('gpu', report['device'])}")
    paths = report["shapes"][0]["paths"] if report["shapes"] else []
    columns = "".join(f" {p[:9] + ' ms':>12} {'speed':>5}" for p in paths)
    print(f"\n{'GEMM':<20} {'tokens x in -> out':>21} {'bf16 ms':>9}{columns} {'bytes':>6}")
    for row in report["shapes"]:
        print(shape_line(row))
    print("speed: BF16 time / W4A8 time (same run); bytes: packed 4-bit codes + scales / BF16")
    step = report.get("step")
    if not step:
        return
    print(f"\n{'whole step':<14} {'tier':<9} {'prec':<5} {'median ms':>9} {'p99 ms':>8} "
          f"{'vs bf16':>8} {'vs FP32':>8} {'start s':>8}")  # fmt: skip
    base = step["bf16"]["model"]["median_ms"]
    for name in [n for n in step if n == "bf16" or n.startswith("w4a8 ")]:
        row = step[name]
        model = row["model"]
        print(
            f"{name:<14} {row['tier']:<9} {row['precision']:<5} {model['median_ms']:>9.3f} "
            f"{model['p99_ms']:>8.3f} {model['median_ms'] / base:>7.2f}x "
            f"{row['reference_error']:>8.1e} {row['start_s']:>8.1f}"
        )
    print("vs FP32: action error against the FP32 model (relative, largest over 3 observations)")
    total = step["model_bytes"]
    print(
        f"\nW4A8 fake-quant (FP32) action error against FP32: {step['fake_quant_error']:.2e}; "
        f"calibration {step['calibration_s']:.1f} s"
    )
    host = total.get("host_tables", 0)
    packed, bf16 = total["w4a8_packed"] - host, total["bf16"] - host
    print(
        f"weights: whole model {total['w4a8_packed'] / 1e6:.1f} MB packed vs "
        f"{total['bf16'] / 1e6:.1f} MB BF16 ({total['w4a8_packed'] / total['bf16']:.3f}x); "
        f"on the GPU (the vocabulary tables, {host / 1e6:.0f} MB, stay on the host) "
        f"{packed / 1e6:.1f} vs {bf16 / 1e6:.1f} MB ({packed / bf16:.3f}x); "
        f"quantized layers as held {step['memory_vs_fp16']['weights']:.3f}x BF16"
    )


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args()
    device = resolve_device(args.device, setting="--device")
    config = network_config(args.tiny)
    settings = QuantSettings(
        block_size=args.block_size, rotation_steps=args.rotation_steps, vision=args.vision
    )
    report: dict[str, Any] = {
        "model": f"pi0 {'tiny widths' if args.tiny else 'gemma_2b + gemma_300m'}, random weights",
        "device": device,
    }
    if device == "cuda":
        report["gpu"] = torch.cuda.get_device_name()
    print("per GEMM shape (layer, tokens x in -> out, ms, speed-up vs BF16, bytes vs BF16):")
    report["shapes"] = bench_shapes(config, CAMERAS, torch.device(device), settings, args.iters)
    if not args.skip_step:
        report["step"] = bench_step(config, device, settings, args)
    print_report(report)
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
