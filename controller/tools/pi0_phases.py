"""Where a pi0 or pi0.5 inference goes, phase by phase, and what real-time chunking adds:

    vision             the frames resized and padded, through SigLIP and the projector, joined
                       with the prompt's embeddings
    prefix             the language model over images and prompt, once: every layer's keys and
                       values (the prefix cache)
    denoising step k   one Euler step of the action expert against the cache, unguided (what
                       RTC off runs), one row per step
    guidance           what RTC adds besides autograd: the prefix's normalization and the mask,
                       the weighted error and the correction arithmetic, inpainting's blend,
                       trained mode's clean rows (derived: RTC's loop - the unguided steps -
                       autograd correction)
    autograd correction  exact mode only: n vector-Jacobian products through the expert, less
                       n plain expert calls (derived: what the VJP costs beyond a forward)

Timed as the flow family's phases are (controller.tools.flow_phases): the eager module in the
serving tier's precision, over the runner's static inputs filled from the codec's example
contexts (with RTC they carry a previous plan and a delay), a DeviceTimer per phase.
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
from policies.flow.settings import RTCConfig
from policies.inputs import example_frames
from policies.pi0.rtc import Pi0RealTimeChunking
from policies.pi0.step import Pi0Step

_PLAIN = RTCConfig(mode="off", regional_compile=False)


def pi0_parts(module: torch.nn.Module) -> tuple[Pi0RealTimeChunking, bool] | None:
    """(a sampler over the served step, whether RTC is on) of a pi0 / pi0.5 module; None for
    other policies. RTC off: a sampler of mode off over the plain step (its phases' helpers)."""
    if isinstance(module, Pi0RealTimeChunking):
        return module, module.rtc.mode != "off"
    if isinstance(module, Pi0Step):
        sampler = Pi0RealTimeChunking(module, _PLAIN)
        # Its own buffers (pi0's times) where the step is; .to() would move the step too.
        sampler.pi0_times = sampler.pi0_times.to(module.action_norm.center.device)
        return sampler, False
    return None


def pi0_summary(module: torch.nn.Module) -> dict[str, Any] | None:
    """What the profile's advice reads (result.flow): RTC mode, chunk size, Euler steps."""
    parts = pi0_parts(module)
    if parts is None:
        return None
    sampler, rtc_on = parts
    return {
        "rtc_mode": sampler.rtc.mode if rtc_on else "off",
        "chunk_size": sampler.step.config.network.chunk_size,
        "n_steps": sampler.n_steps,
    }


def _measure_once(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    sampler: Pi0RealTimeChunking,
    rtc_on: bool,
    device_timer: DeviceTimer,
) -> list[float]:
    """[forward, vision, prefix, step 0..n-1, RTC loop, n VJPs, n expert calls], seconds."""

    def timer(work: Callable[[], Any]) -> float:
        return device_timer.time(work)[1]

    step, network = sampler.step, sampler.step.network
    groups = len(step.group_sizes)
    frames = inputs[:groups]
    state, noise, prompt, prompt_mask = inputs[groups : groups + 4]
    n = sampler.n_steps
    held: dict[str, Any] = {}

    def vision() -> None:
        images, image_masks, token_mask, held["state"] = step.prepare(frames, state, prompt_mask)
        held["prefix"] = network.embed_prefix(images, image_masks, prompt, token_mask)

    total = timer(lambda: module(*inputs))
    seen = [total, timer(vision)]
    seen.append(timer(lambda: held.__setitem__("cache", network.encode_prefix(*held["prefix"]))))
    context = (held["cache"], held["state"])
    held["x"] = noise

    def euler(k: int) -> Callable[[], None]:
        def run() -> None:
            x = held["x"]
            held["x"] = x + sampler.velocity(x, k, context) / n

        return run

    seen += [timer(euler(k)) for k in range(n)]  # each step on the unguided trajectory
    if not rtc_on:
        return [*seen, 0.0, 0.0, 0.0]
    prefix, prefix_len, delay = inputs[-3:]

    def rtc_loop() -> None:
        target = sampler.guidance_target(prefix)
        mask = sampler.guidance_mask(prefix_len, delay).to(target.dtype)
        a = noise
        for k in range(n):
            a = sampler.denoise(a, k, context, target, mask, noise)

    seen.append(timer(rtc_loop))
    vjp = fwd = 0.0
    if sampler.rtc.mode == "exact":
        target = sampler.guidance_target(prefix)
        mask = sampler.guidance_mask(prefix_len, delay).to(target.dtype)
        vjp = timer(
            lambda: [sampler.correction_exact(noise, k, context, target, mask) for k in range(n)]
        )
        fwd = timer(lambda: [sampler.velocity(noise, k, context) for k in range(n)])
    return [*seen, vjp, fwd]


def pi0_phase_rows(runner: Runner, precision: str, iterations: int) -> list[Row]:
    """Rows (group "phases", shares of the eager forward) for a pi0 / pi0.5 policy."""
    path = runner.step_path
    half = precision_dtype(precision) if path.device.type == "cuda" else None
    module = eager_module(runner, half)
    parts = pi0_parts(module)
    if parts is None:
        return []
    sampler, rtc_on = parts
    n = sampler.n_steps
    timer = DeviceTimer(path.device)
    columns: list[list[float]] = []

    def autocast() -> Any:
        if half is None:
            return torch.autocast("cpu", enabled=False)
        return torch.autocast(path.device.type, dtype=half)

    with torch.no_grad(), path.on_stream(), autocast():
        for i in timed_rounds(iterations):
            seed = 7 + i % 4
            path.upload(example_frames(runner.spec, seed), runner.codec.example(seed))
            measured = _measure_once(module, path.staging.tensors, sampler, rtc_on, timer)
            if i >= 2:  # the first calls: allocator and kernel caches
                columns.append(measured)
    c = np.asarray(columns).T
    how = f"{timer.how}, eager"
    mode = sampler.rtc.mode if rtc_on else "off"
    label = f"eager pi0 forward, RTC {mode} ({precision})"
    rows = [
        Row("phase:total", label, "phases", c[0], how, "phase:total"),
        Row("phase:vision", "vision (frames -> image tokens)", "phases", c[1], how, "phase:total"),
        Row("phase:prefix", "prefix (keys and values, once)", "phases", c[2], how, "phase:total"),
    ]
    rows += [
        Row(f"phase:step{k}", f"denoising step {k}", "phases", c[3 + k], how, "phase:total")
        for k in range(n)
    ]
    if rtc_on:
        loop, vjp, fwd = c[3 + n], c[4 + n], c[5 + n]
        steps = c[3 : 3 + n].sum(axis=0)
        rows += rtc_phase_rows(mode, loop, steps, vjp, fwd, "denoising steps")
    return rows
