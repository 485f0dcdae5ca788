"""W4A8 DuQuant ACT against the unquantized ACT, through Tempo's tier ladder, in one run.

    python -m scripts.quant.bench_quant --device cuda   # ACT at ALOHA size (3 x 480x640, 14 joints)
    python -m scripts.quant.bench_quant --device cpu    # a small camera-less ACT (minutes)

Prints one table:
- step time of every ready tier (model alone: CUDA events on a GPU, wall time on a CPU), for
  the FP32 model (the baseline: its graph tier in FP16 on CUDA) and for the quantized model with
  each compiled path (int8: torch._int_mm; dequant: weights dequantized in forward; packed:
  int8 path with the 4-bit codes held two per byte), each against the baseline's top tier;
- every quantized tier's parity error against the FP32 fake-quant reference (eager_fp32 of the
  quantized model) and its action error against the FP32 unquantized model;
- device memory of the quantized layers against the same layers in FP16;
- DuQuant against round-to-nearest W4A8 (static activation scales; per-token too with
  --all-activations), on the model as it is and with 100x outlier channels injected into its
  encoder.
After timing, the quantized graph tier serves more steps to confirm no recompile and no CUDA
graph error (either would demote it).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from controller.inference.build import build_runner, resolve_device
from controller.runner_config import RunnerConfig
from controller.tools.bench_policy import percentiles_ms
from controller.tools.quantize import run_module, stacked_observations
from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.base import PolicySpec
from policies.quant.act import set_submodule
from policies.quant.apply import quantize_module
from policies.quant.config import QuantSettings
from policies.quant.layer import QuantLinear, memory_bytes
from policies.tensor_policy import ReferenceChunks, TensorPolicy
from scripts.measure import relative_error

log = logging.getLogger("bench_quant")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--observations", type=int, default=16, help="calibration observations")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--iters", type=int, default=200, help="timed steps per tier")
    parser.add_argument("--precision", choices=["fp16", "bf16"], default="fp16")
    parser.add_argument(
        "--all-activations",
        action="store_true",
        help="compare DuQuant and RTN with per-token activation scales too (4 more calibrations)",
    )
    parser.add_argument("--json", dest="json_out", type=Path, help="write the results here")
    return parser.parse_args()


def small_act(seed: int = 0) -> TensorPolicy:
    """A camera-less ACT (14 joints + 32 environment values), width 128: compiles in seconds
    on a CPU."""
    config = ACTConfig(
        n_cameras=0,
        image_height=1,
        image_width=1,
        state_dim=14,
        env_state_dim=32,
        action_dim=14,
        chunk_size=20,
        dim_model=128,
        n_heads=4,
        dim_feedforward=512,
        n_encoder_layers=2,
        n_decoder_layers=1,
        latent_dim=16,
        use_vae=False,
    )
    joints = tuple(f"joint_{i}" for i in range(14))
    spec = PolicySpec(cameras=(), state_size=46, joint_names=joints, chunk_size=20)
    torch.manual_seed(seed)
    with torch.no_grad():
        return TensorPolicy(spec=spec, module=ACT(config).eval())


def fp32_policy(device: str) -> tuple[TensorPolicy, str]:
    if device == "cuda":
        from policies.demo import make_aloha_policy

        return make_aloha_policy(), "ACT, LeRobot ALOHA defaults (3 x 480x640, 14 joints)"
    return small_act(), "camera-less ACT, width 128 (CPU size)"


def quantized(
    policy: TensorPolicy,
    settings: QuantSettings,
    calibration: tuple[np.ndarray, np.ndarray],
    device: torch.device,
) -> TensorPolicy:
    module = copy.deepcopy(policy.module).to(device)
    images, state = calibration

    def calibrate() -> None:
        run_module(module, images, state, device)

    quantize_module(module, settings, calibrate)
    return TensorPolicy(spec=policy.spec, module=module.cpu(), reference=policy.reference)


def repacked(policy: TensorPolicy) -> TensorPolicy:
    """The same quantized policy with its 4-bit codes held two per byte (no recalibration)."""
    module = copy.deepcopy(policy.module)
    for name, layer in list(module.named_modules()):
        if isinstance(layer, QuantLinear):
            twin = QuantLinear(layer.layout, layer.compiled_path, packed=True)
            state = {k: v for k, v in layer.state_dict().items() if k != "weight_q"}
            twin.load_state_dict(state, strict=False)
            twin.set_codes(layer.codes())
            set_submodule(module, name, twin)
    return TensorPolicy(spec=policy.spec, module=module, reference=policy.reference)


def serve(policy: TensorPolicy, device: str, args: argparse.Namespace, cache: Path):  # type: ignore[no-untyped-def]
    config = RunnerConfig(
        top_tier="graph" if device == "cuda" else "compiled",
        precision=args.precision,
        cache_dir=cache,
        step_budget_ms=None,
        reference_parity_rtol=10.0,  # measured and printed here, not enforced
    )
    began = time.perf_counter()
    runner = build_runner(policy, config, device)
    return runner, time.perf_counter() - began


def time_tiers(runner, iters: int) -> dict[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    from controller.inference.examples import random_observation

    reports = {t["name"]: t for t in runner.status()["tiers"]}
    out: dict[str, dict[str, Any]] = {}
    for name in runner.ready_tiers:
        runner.use_tier(name)
        for i in range(10):
            runner.predict_chunk(*random_observation(runner.spec, 500 + i))
        samples = runner.time_device(name, iters)
        out[name] = {
            "precision": reports[name]["precision"],
            "model": percentiles_ms(samples),
            "parity_error": reports[name]["parity_error"],
            "reference_error": reports[name]["reference_error"],
        }
    skipped = {t["name"]: t["reason"] for t in reports.values() if t["state"] == "skipped"}
    return {"tiers": out, "skipped": skipped}


def serve_steady(runner, steps: int = 50) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Serve `steps` steps on the top tier: a recompile or graph error would demote it."""
    from controller.inference.examples import random_observation

    top = runner.ready_tiers[0]
    runner.use_tier(top)
    for i in range(steps):
        runner.predict_chunk(*random_observation(runner.spec, 900 + i))
    return {"tier": top, "still_serving": runner.tier == top, "demotions": len(runner.demotions)}


def inject_outliers(module: torch.nn.Module, factor: float = 100.0) -> torch.nn.Module:
    """Scale four output channels of every encoder LayerNorm by `factor`: the outlier features
    trained transformers grow, which the next layers' inputs then carry."""
    module = copy.deepcopy(module)
    with torch.no_grad():
        for name, child in module.named_modules():
            if name.startswith("encoder.") and isinstance(child, torch.nn.LayerNorm):
                child.weight[:4] *= factor
    return module


def method_errors(
    policy: TensorPolicy,
    calibration: tuple[np.ndarray, np.ndarray],
    reference: tuple[np.ndarray, np.ndarray],
    device: torch.device,
    block: int,
    activations: tuple[str, ...],
) -> dict[str, float]:
    """Action error (largest relative, FP32 fake-quant) of each method against the FP32 model."""
    fp32 = run_module(policy.module.to(device), *reference, device)
    out = {}
    for method in ("duquant", "rtn"):
        for activation in activations:
            settings = QuantSettings(method=method, activations=activation, block_size=block)  # type: ignore[arg-type]
            q = quantized(policy, settings, calibration, device).module.to(device)
            chunks = run_module(q, *reference, device)
            out[f"{method}/{activation}"] = max(
                relative_error(c, r) for c, r in zip(chunks, fp32, strict=True)
            )
    return out


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args()
    device = resolve_device(args.device, setting="--device")
    torch_device = torch.device(device)
    policy, description = fp32_policy(device)
    spec = policy.spec
    calibration = stacked_observations(spec, args.observations, seed=11_000)
    reference_obs = stacked_observations(spec, 4, seed=22_000)
    module = policy.module.to(torch_device)
    chunks = run_module(module, *reference_obs, torch_device)
    policy.module = module.cpu()
    policy.reference = ReferenceChunks(
        images=reference_obs[0], state=reference_obs[1], chunks=chunks
    )
    report: dict[str, Any] = {"policy": description, "device": device, "variants": {}}
    if device == "cuda":
        report["gpu"] = torch.cuda.get_device_name()
    base_settings = QuantSettings(block_size=args.block_size)
    variants = {
        "fp32 model": policy,
        "w4a8 int8": quantized(policy, base_settings, calibration, torch_device),
    }
    variants["w4a8 dequant"] = copy.deepcopy(variants["w4a8 int8"])
    for layer in variants["w4a8 dequant"].module.modules():
        if isinstance(layer, QuantLinear):
            layer.compiled_path = "dequant"
    variants["w4a8 int8 packed"] = repacked(variants["w4a8 int8"])
    with tempfile.TemporaryDirectory() as cache:
        for name, variant in variants.items():
            runner, start_s = serve(variant, device, args, Path(cache) / name.replace(" ", "_"))
            result = time_tiers(runner, args.iters)
            result["start_s"] = start_s
            memory = memory_bytes(variant.module)
            if memory["fp16"]:
                result["memory"] = {k: v / memory["fp16"] for k, v in memory.items()}
            if name != "fp32 model":
                result["steady"] = serve_steady(runner)
            report["variants"][name] = result
            del runner
    activations = ("static", "dynamic") if args.all_activations else ("static",)
    report["methods"] = method_errors(
        policy, calibration, reference_obs, torch_device, args.block_size, activations
    )
    outliers = TensorPolicy(spec=spec, module=inject_outliers(policy.module))
    report["methods_outliers"] = method_errors(
        outliers, calibration, reference_obs, torch_device, args.block_size, activations
    )
    print_table(report)
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2, default=str))
    return 0


def print_table(report: dict[str, Any]) -> None:
    print(f"\n{report['policy']} on {report.get('gpu', report['device'])}")
    base = report["variants"]["fp32 model"]["tiers"]
    top = next(iter(base))
    base_ms = base[top]["model"]["median_ms"]
    print(f"baseline: FP32 model, tier {top} ({base[top]['precision']}): {base_ms:.3f} ms\n")
    print(
        f"{'variant':<18} {'tier':<11} {'prec':<5} {'median ms':>9} {'p99 ms':>8} "
        f"{'vs base':>8} {'vs fakeq':>9} {'vs FP32':>8}"
    )
    for name, result in report["variants"].items():
        for tier, row in result["tiers"].items():
            model = row["model"]
            ratio = model["median_ms"] / base_ms
            parity = row["parity_error"] if name != "fp32 model" else None
            against = row["reference_error"]
            print(
                f"{name:<18} {tier:<11} {row['precision']:<5} {model['median_ms']:>9.3f} "
                f"{model['p99_ms']:>8.3f} {ratio:>7.2f}x {_e(parity):>9} {_e(against):>8}"
            )
        for tier, reason in result["skipped"].items():
            print(f"{name:<18} {tier:<11} skipped: {reason}")
    print("\nvs base: model time / baseline top tier; vs fakeq: parity against the FP32 fake-quant")
    print("reference (eager_fp32 of the quantized model); vs FP32: action error against the FP32")
    print("unquantized model (relative, largest over 4 observations)\n")
    for name, result in report["variants"].items():
        if "memory" in result:
            m = result["memory"]
            print(
                f"{name:<18} memory of quantized layers: weights {m['weights']:.3f}x FP16, "
                f"transforms {m['transform']:.3f}x (total {m['weights'] + m['transform']:.3f}x)"
            )
        if "steady" in result:
            s = result["steady"]
            print(
                f"{name:<18} 50 more steps on {s['tier']}: still serving {s['still_serving']}, "
                f"demotions {s['demotions']}"
            )
    print("\naction error against FP32 (FP32 fake-quant, largest relative over 4 observations)")
    print(f"{'method/activations':<20} {'model as is':>12} {'100x outliers':>14}")
    for key, value in report["methods"].items():
        print(f"{key:<20} {value:>12.3e} {report['methods_outliers'][key]:>14.3e}")


def _e(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


if __name__ == "__main__":
    sys.exit(main())
