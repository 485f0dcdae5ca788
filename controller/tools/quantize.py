"""`tempo quantize CHECKPOINT OUT --observations N`: calibrate and write a W4A8 checkpoint.

1. Load the FP32 checkpoint (Tempo or LeRobot ACT).
2. Record the FP32 model's chunks on a few observations of their own: the quantized checkpoint
   carries them, and the runner checks every tier against them at start-up
   (`reference_parity_rtol`).
3. Calibrate on N observations, synthesized from the spec (random frames and states, seeded) or
   recorded ones (`--recorded FILE.npz` with `images` uint8 (n, cameras, H, W, 3) and `state`
   float32 (n, state_history, state_size), read with allow_pickle=False); recorded ones give
   the activation statistics the robot will really produce.
4. Quantize (policies.quant.apply) and write the checkpoint (policies.quant.checkpoint).

Serve the result with `tempo serve --policy.path OUT`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from controller.errors import CheckpointError, ConfigError
from controller.inference.examples import random_observation
from controller.inference.parity import relative_error
from policies.base import PolicySpec
from policies.checkpoints.load import load_checkpoint
from policies.quant.act import split_attention
from policies.quant.apply import quantize_module
from policies.quant.checkpoint import save_quantized_checkpoint
from policies.quant.config import LayerLayout, Quantization, QuantSettings
from policies.quant.layer import memory_bytes
from policies.quant.pi0_packs import import_pi0_packs
from policies.tensor_policy import ReferenceChunks, TensorPolicy

log = logging.getLogger(__name__)

_CALIBRATION_SEED = 7_000_003
_REFERENCE_SEED = 9_000_011


@dataclass(frozen=True)
class QuantizeReport:
    directory: Path
    layers: int
    calibration_s: float
    error_vs_fp32: float  # largest relative error of the fake-quant reference on the reference set
    weight_ratio: float  # quantized layers' weights (codes + scales) / the same in FP16
    transform_ratio: float  # their rotations, permutations and scales / FP16 weights

    def lines(self) -> list[str]:
        return [
            f"wrote a quantized checkpoint to {self.directory} ({self.layers} W4A8 layers, "
            f"calibrated in {self.calibration_s:.1f} s)",
            f"action error of the FP32 fake-quant model against FP32: {self.error_vs_fp32:.2e} "
            "(relative, largest over the reference observations)",
            f"memory of the quantized layers: weights {self.weight_ratio:.3f}x FP16, transforms "
            f"{self.transform_ratio:.3f}x",
            f"serve it with `tempo serve --policy.path {self.directory}`",
        ]


def stacked_observations(spec: PolicySpec, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` random observations of `spec` (the runner's generator), stacked: images uint8
    (n, cameras, H, W, 3) in spec order, state float32 (n, state_history, state_size)."""
    observations = [random_observation(spec, seed + i) for i in range(count)]
    height, width = (spec.cameras[0].height, spec.cameras[0].width) if spec.cameras else (1, 1)
    images = np.zeros((count, len(spec.cameras), height, width, 3), dtype=np.uint8)
    for i, (frames, _) in enumerate(observations):
        for k, camera in enumerate(spec.cameras):
            images[i, k] = frames[camera.name]
    return images, np.stack([state for _, state in observations]).astype(np.float32)


def read_recorded(path: Path, spec: PolicySpec) -> tuple[np.ndarray, np.ndarray]:
    """Recorded observations from an .npz file (no pickle), checked against the spec."""
    try:
        with np.load(path, allow_pickle=False) as data:
            images, state = data["images"], data["state"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(
            f"--recorded {path}: not an .npz with arrays 'images' and 'state' ({exc})"
        ) from None
    height, width = (spec.cameras[0].height, spec.cameras[0].width) if spec.cameras else (1, 1)
    want_images = (len(spec.cameras), height, width, 3)
    want_state = (spec.state_history, spec.state_size)
    if images.dtype != np.uint8 or images.ndim != 5 or images.shape[1:] != want_images:
        raise ConfigError(
            f"--recorded {path}: images must be uint8 (n, {', '.join(map(str, want_images))}), "
            f"got {images.dtype} {images.shape}"
        )
    if state.ndim != 3 or state.shape[1:] != want_state or state.shape[0] != images.shape[0]:
        raise ConfigError(
            f"--recorded {path}: state must be ({images.shape[0]}, "
            f"{', '.join(map(str, want_state))}), got {state.shape}"
        )
    return images, state.astype(np.float32)


def run_module(
    module: torch.nn.Module, images: np.ndarray, state: np.ndarray, device: torch.device
) -> np.ndarray:
    """The module's chunks on stacked observations, one at a time (batch 1, as served)."""
    out = []
    with torch.no_grad():
        for i in range(images.shape[0]):
            image_t = torch.from_numpy(images[i : i + 1]).to(device)
            state_t = torch.from_numpy(state[i : i + 1]).to(device)
            out.append(module(image_t, state_t)[0].float().cpu().numpy())
    return np.stack(out)


def quantize_checkpoint(
    source: Path,
    destination: Path,
    observations: int,
    settings: QuantSettings,
    *,
    reference_observations: int = 4,
    recorded: Path | None = None,
    pi0_packs: Path | None = None,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> QuantizeReport:
    """Quantize the FP32 checkpoint `source` into `destination` (see the module docstring).
    With `pi0_packs`, the transforms come from the pi0 DuQuant port's per-layer .npz packs
    (matched by layer name) instead of calibration, with per-token activation scales."""
    say = progress or (lambda message: log.info("%s", message))
    if observations < 1:
        raise ConfigError("--observations must be at least 1")
    if Path(destination).resolve() == Path(source).resolve():
        raise ConfigError(
            "the quantized checkpoint must go to a different directory than its source"
        )
    torch_device = torch.device(device)
    policy = load_checkpoint(source, device=torch_device)
    if any(type(m).__name__ == "QuantLinear" for m in policy.module.modules()):
        raise CheckpointError(f"{source} is already quantized; quantize the FP32 checkpoint")
    spec, module = policy.spec, policy.module.eval()
    ref_images, ref_state = stacked_observations(spec, reference_observations, _REFERENCE_SEED)
    fp32_chunks = run_module(module, ref_images, ref_state, torch_device)
    if pi0_packs is not None:
        started = time.perf_counter()
        split_attention(module)
        try:
            layouts = import_pi0_packs(module, pi0_packs, settings.compiled_path)
        except ValueError as exc:
            raise CheckpointError(f"--pi0-packs: {exc}") from None
        settings = settings.model_copy(update={"activations": "dynamic"})
        say(f"imported {len(layouts)} DuQuant packs from {pi0_packs}")
        return _finish(
            destination,
            spec,
            module,
            settings,
            layouts,
            "pi0-duquant-packs",
            0,
            (ref_images, ref_state, fp32_chunks),
            time.perf_counter() - started,
            torch_device,
        )
    if recorded is not None:
        images, state = read_recorded(recorded, spec)
        images, state = images[:observations], state[:observations]
        say(f"calibrating on {images.shape[0]} recorded observations from {recorded}")
    else:
        images, state = stacked_observations(spec, observations, _CALIBRATION_SEED)
        say(f"calibrating on {observations} observations synthesized from the spec")

    def run_calibration() -> None:
        run_module(module, images, state, torch_device)

    started = time.perf_counter()
    layouts = quantize_module(module, settings, run_calibration)
    return _finish(
        destination,
        spec,
        module,
        settings,
        layouts,
        "calibrated",
        int(images.shape[0]),
        (ref_images, ref_state, fp32_chunks),
        time.perf_counter() - started,
        torch_device,
    )


def _finish(
    destination: Path,
    spec: PolicySpec,
    module: torch.nn.Module,
    settings: QuantSettings,
    layouts: dict[str, LayerLayout],
    source: Literal["calibrated", "pi0-duquant-packs"],
    observations: int,
    reference_set: tuple[np.ndarray, np.ndarray, np.ndarray],
    calibration_s: float,
    torch_device: torch.device,
) -> QuantizeReport:
    """Measure the quantized model against the FP32 chunks, then write the checkpoint."""
    ref_images, ref_state, fp32_chunks = reference_set
    quantized_chunks = run_module(module, ref_images, ref_state, torch_device)
    error = max(relative_error(q, r) for q, r in zip(quantized_chunks, fp32_chunks, strict=True))
    reference = ReferenceChunks(images=ref_images, state=ref_state, chunks=fp32_chunks)
    record = Quantization(
        source=source,
        settings=settings,
        observations=observations,
        layers=layouts,
        fp32_reference_observations=int(fp32_chunks.shape[0]),
    )
    written = save_quantized_checkpoint(
        destination, TensorPolicy(spec=spec, module=module, reference=reference), record
    )
    memory = memory_bytes(module)
    return QuantizeReport(
        directory=written,
        layers=len(layouts),
        calibration_s=calibration_s,
        error_vs_fp32=error,
        weight_ratio=memory["weights"] / memory["fp16"],
        transform_ratio=memory["transform"] / memory["fp16"],
    )
