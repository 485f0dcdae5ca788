"""The per GEMM shape half of bench_quant_pi0 (beside it): each of pi0's GEMM shapes as one layer,
BF16 nn.Linear (the baseline) against QuantLinear's compute paths (int8; fused and fused with
packed 4-bit weights where the Triton kernels run; dequant), timed in the same run (compiled
and captured in a CUDA graph on a GPU, compiled on a CPU), with its weight bytes; and the table
line of one shape.

    rows = bench_shapes(config, cameras, device, settings, iters)   # prints each row as it goes
    print(shape_line(rows[0]))
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from controller.tools.bench_policy import percentiles_ms
from policies.pi0.config import Pi0Config
from policies.quant import kernels
from policies.quant.config import QuantSettings
from policies.quant.duquant import StatsCollector, duquant_plan
from policies.quant.layer import QuantLinear


def gemm_shapes(config: Pi0Config, cameras: int) -> list[tuple[str, int, int, int]]:
    """(name, tokens, in, out) of the prefix's and the expert's GEMMs, `cameras` images."""
    vision, language, expert = config.vision, config.language, config.expert
    prefix = cameras * (vision.image_size // vision.patch_size) ** 2 + config.tokenizer_max_length
    suffix = config.chunk_size + 1  # the state token, then the actions
    shapes = []
    for tower, tokens, w in (("prefix", prefix, language), ("expert", suffix, expert)):
        q, kv = w.num_heads * w.head_dim, w.num_kv_heads * w.head_dim
        shapes += [
            (f"{tower} q_proj", tokens, w.width, q),
            (f"{tower} k/v_proj", tokens, w.width, kv),
            (f"{tower} o_proj", tokens, q, w.width),
            (f"{tower} gate/up_proj", tokens, w.width, w.mlp_dim),
            (f"{tower} down_proj", tokens, w.mlp_dim, w.width),
        ]
    return shapes


def quant_layer(linear: nn.Linear, x: torch.Tensor, settings: QuantSettings) -> QuantLinear:
    collector = StatsCollector()
    collector.update(x.float())
    if collector.stats is None:
        raise RuntimeError("no activation statistics were recorded")
    plan = duquant_plan(
        linear.weight, collector.stats, settings.block_size, steps=settings.rotation_steps
    )
    peak = float(plan.transform_input(x.double().cpu()).abs().max())
    return QuantLinear.from_plan(linear.weight, linear.bias, plan, peak / 127, "int8")


def compute_paths(device: torch.device) -> list[str]:
    """The variants timed against BF16 on `device`: the fused ones only where the Triton
    kernels run (elsewhere they would time the int8 path again)."""
    if kernels.available(device):
        return ["int8", "fused", "fused packed", "dequant"]
    return ["int8", "dequant"]


def variant(quant: QuantLinear, path: str) -> QuantLinear:
    """The layer running `path`; "fused packed" is a twin holding the codes two per byte."""
    if path != "fused packed":
        quant.compiled_path = path  # type: ignore[assignment]
        return quant
    twin = QuantLinear(quant.layout, "fused", packed=True)
    state = dict(quant.state_dict())
    codes = state.pop("weight_q")
    twin.load_state_dict(state, strict=False)
    twin.set_codes(codes)
    return twin.to(codes.device).eval()


def timed(fn: Callable[[], torch.Tensor], iters: int, device: torch.device) -> dict[str, float]:
    """Replays of `fn` (compiled): captured in a CUDA graph on a GPU, called on a CPU."""
    for _ in range(3):
        fn()
    if device.type != "cuda":
        samples = []
        for _ in range(iters):
            began = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - began)
        return percentiles_ms(samples)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    samples = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return percentiles_ms(samples)


def bench_shapes(
    config: Pi0Config, cameras: int, device: torch.device, settings: QuantSettings, iters: int
) -> list[dict[str, Any]]:
    """Each GEMM shape's row (printed as it is measured): median and percentiles in ms for BF16
    and each of `compute_paths`, and the weight bytes."""
    half = torch.bfloat16 if device.type == "cuda" else torch.float32
    backend = "inductor" if device.type == "cuda" else "eager"
    rows = []
    for name, tokens, fan_in, fan_out in gemm_shapes(config, cameras):
        torch._dynamo.reset()
        gen = torch.Generator().manual_seed(fan_in * 7 + fan_out)
        linear = nn.Linear(fan_in, fan_out, bias=False)
        with torch.no_grad():
            linear.weight.normal_(0.0, fan_in**-0.5, generator=gen)
        x = torch.randn(tokens, fan_in, generator=gen)
        x[:, :4] *= 30.0  # a few outlier channels, as trained transformers grow
        quant = quant_layer(linear, x, settings).to(device).eval()
        x = x.to(device)
        x_half = x.to(half)
        baseline = linear.to(device, half).eval()
        row: dict[str, Any] = {"layer": name, "tokens": tokens, "in": fan_in, "out": fan_out}
        row["paths"] = compute_paths(device)
        with torch.no_grad():
            compiled = torch.compile(baseline, fullgraph=True, dynamic=False, backend=backend)

            def run_baseline(c: Any = compiled, x: torch.Tensor = x_half) -> torch.Tensor:
                return c(x)  # type: ignore[no-any-return]

            row["bf16"] = timed(run_baseline, iters, device)
            for path in row["paths"]:
                torch._dynamo.reset()
                layer = variant(quant, path)
                qc = torch.compile(layer, fullgraph=True, dynamic=False, backend=backend)

                def run(qc: Any = qc, x: torch.Tensor = x_half) -> torch.Tensor:
                    with torch.autocast(device.type, dtype=half, enabled=device.type == "cuda"):
                        return qc(x)  # type: ignore[no-any-return]

                row[path] = timed(run, iters, device)
        packed = fan_out * quant.width // 2 + fan_out * 4  # two codes a byte, FP32 scales
        row["bytes"] = {"bf16": fan_in * fan_out * 2, "w4_packed": packed}
        rows.append(row)
        print(shape_line(row), flush=True)
    return rows


def shape_line(row: dict[str, Any]) -> str:
    """One shape's row of the table: ms for each path, speed-up against BF16, bytes against BF16."""
    base = row["bf16"]["median_ms"]
    parts = [f"{row['layer']:<20} {row['tokens']:>5} x {row['in']:>5} -> {row['out']:>5}"]
    parts.append(f"{base:>9.4f}")
    for path in row.get("paths", ["int8", "dequant"]):
        ms = row[path]["median_ms"]
        parts.append(f"{ms:>12.4f} {base / ms:>5.2f}x")
    parts.append(f"{row['bytes']['w4_packed'] / row['bytes']['bf16']:>6.3f}")
    return " ".join(parts)
