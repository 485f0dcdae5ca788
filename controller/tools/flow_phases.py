"""Where a flow policy's inference goes, phase by phase, and what real-time chunking adds
(pi0 and pi0.5: controller.tools.pi0_phases; phase_rows serves either):

    encoding           images and state -> the context (backbone, context transformer, the
                       expert layers' keys and values): once per inference
    base denoising     n Euler steps of the action expert, unguided (what RTC off runs)
    guidance           what RTC adds besides autograd: the prefix's normalization and the mask,
                       the weighted error and the correction arithmetic, inpainting's blend
                       (derived: RTC's sampling loop - base denoising - autograd correction)
    autograd correction  exact mode only: n vector-Jacobian products through the action expert,
                       less n plain expert calls (derived: what the VJP costs beyond a forward)

Each phase is timed on the eager module, in the serving tier's precision, over the runner's
static inputs filled from the codec's example contexts (they carry a previous plan and a delay,
so the guidance has a prefix to work on): CUDA events on a GPU, wall clock on a CPU (a
`DeviceTimer`, controller.inference.device_timer). The serving
tier fuses kernels across these phases; read their shares, and the step rows for absolute time.
Which module, and for how long: controller.tools.phase_timing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from controller.inference.device_timer import DeviceTimer
from controller.inference.runner import Runner
from controller.inference.tiers import precision_dtype
from controller.tools.phase_timing import eager_module, timed_rounds
from controller.tools.profile_result import Row, rtc_phase_rows
from policies.flow.model import FlowMatchingPolicy
from policies.flow.rtc import RealTimeChunking
from policies.inputs import example_frames


def phase_summary(module: torch.nn.Module) -> dict[str, Any] | None:
    """What the profile's advice reads of a phased policy (flow, pi0, pi0.5): its RTC mode,
    chunk size and Euler steps; None for a policy timed per submodule instead."""
    parts = flow_parts(module)
    if parts is not None:
        flow, rtc = parts
        return {
            "rtc_mode": rtc.rtc.mode if rtc is not None else "off",
            "chunk_size": flow.config.chunk_size,
            "n_steps": flow.config.n_steps,
        }
    from controller.tools.pi0_phases import pi0_summary

    return pi0_summary(module)


def phase_rows(runner: Runner, precision: str, iterations: int) -> list[Row]:
    """The phase rows of a flow, pi0 or pi0.5 policy (flow_phase_rows, pi0_phase_rows)."""
    if flow_parts(runner.step_path.module) is not None:
        return flow_phase_rows(runner, precision, iterations)
    from controller.tools.pi0_phases import pi0_phase_rows

    return pi0_phase_rows(runner, precision, iterations)


def flow_parts(
    module: torch.nn.Module,
) -> tuple[FlowMatchingPolicy, RealTimeChunking | None] | None:
    """(the flow policy, its RTC wrapper or None) of a served module; None for other policies."""
    if isinstance(module, RealTimeChunking):
        return module.flow, module
    if isinstance(module, FlowMatchingPolicy):
        return module, None
    return None


def _measure_once(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    flow: FlowMatchingPolicy,
    rtc: RealTimeChunking | None,
    device_timer: DeviceTimer,
) -> tuple[float, ...]:
    """(forward, encode, base loop, RTC loop, n VJPs, n expert calls), seconds, on `inputs`."""

    def timer(work: Callable[[], Any]) -> float:
        return device_timer.time(work)[1]

    images, state, noise = inputs[0], inputs[1], inputs[2]
    n = flow.config.n_steps
    holder: dict[str, Any] = {}
    total = timer(lambda: module(*inputs))
    encode = timer(lambda: holder.__setitem__("context", flow.encode(images, state)))
    context = holder["context"]

    def base_loop() -> None:
        x = noise
        for step in range(n):
            x = x + flow.velocity(x, step, context) / n

    base = timer(base_loop)
    if rtc is None:
        return total, encode, base, 0.0, 0.0, 0.0
    target, mask = rtc.guidance_targets(inputs[3], inputs[4], inputs[5])

    def rtc_loop() -> None:
        guided_target, guided_mask = rtc.guidance_targets(inputs[3], inputs[4], inputs[5])
        x = noise
        for step in range(n):
            x = rtc.denoise(x, step, context, guided_target, guided_mask, noise)

    loop = timer(rtc_loop)
    vjp = fwd = 0.0
    if rtc.rtc.mode == "exact":
        vjp = timer(
            lambda: [rtc.correction_exact(noise, s, context, target, mask) for s in range(n)]
        )
        fwd = timer(lambda: [flow.velocity(noise, s, context) for s in range(n)])
    return total, encode, base, loop, vjp, fwd


def flow_phase_rows(runner: Runner, precision: str, iterations: int) -> list[Row]:
    """Rows (group "phases", shares of the eager RTC or flow forward) for a flow policy."""
    path = runner.step_path
    half = precision_dtype(precision) if path.device.type == "cuda" else None
    module = eager_module(runner, half)
    parts = flow_parts(module)
    if parts is None:
        return []
    flow, rtc = parts
    codec = runner.codec
    timer = DeviceTimer(path.device)
    n = flow.config.n_steps
    columns: dict[str, list[float]] = {
        k: [] for k in ("total", "encode", "base", "loop", "vjp", "fwd")
    }

    def autocast() -> Any:
        if half is None:
            return torch.autocast("cpu", enabled=False)
        return torch.autocast(path.device.type, dtype=half)

    with torch.no_grad(), path.on_stream(), autocast():
        for i in timed_rounds(iterations):
            seed = 7 + i % 4
            path.upload(example_frames(runner.spec, seed), codec.example(seed))
            measured = _measure_once(module, path.staging.tensors, flow, rtc, timer)
            if i < 2:
                continue  # first calls: allocator and kernel caches
            for key, value in zip(columns, measured, strict=True):
                columns[key].append(value)
    c = {k: np.asarray(v) for k, v in columns.items()}
    how = f"{timer.how}, eager"
    label = f"eager {'RTC ' + rtc.rtc.mode if rtc is not None else 'flow'} forward ({precision})"
    rows = [
        Row("phase:total", label, "phases", c["total"], how, "phase:total"),
        Row(
            "phase:encode",
            "encoding (once per inference)",
            "phases",
            c["encode"],
            how,
            "phase:total",
        ),
        Row(
            "phase:base",
            f"base denoising ({n} expert steps)",
            "phases",
            c["base"],
            how,
            "phase:total",
        ),
    ]
    if rtc is not None:
        rows += rtc_phase_rows(rtc.rtc.mode, c["loop"], c["base"], c["vjp"], c["fwd"], "base")
    return rows
