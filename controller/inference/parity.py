"""The tiers' numerical checks: every output finite, and each tier's outputs against the eager
FP32 reference (relative error, or the policy's own measure)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from controller.inference.examples import Example
from policies.tensor_policy import ParityMeasure

if TYPE_CHECKING:
    from controller.inference.step_path import StepPath
    from controller.inference.tiers import Tier


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64 (absolute error when the reference is all zeros)."""
    diff = np.linalg.norm(out.astype(np.float64) - ref.astype(np.float64))
    norm = np.linalg.norm(ref.astype(np.float64))
    return float(diff / norm) if norm > 0 else float(diff)


class NonFiniteOutput(RuntimeError):
    """A tier returned NaN or Inf."""


def all_finite(outputs: list[np.ndarray]) -> bool:
    for out in outputs:  # a plain loop: the serving step runs this on every output
        if not np.isfinite(out).all():
            return False
    return True


def reference_outputs(
    path: StepPath, reference: Tier, examples: list[Example], times: list[float] | None = None
) -> list[list[np.ndarray]]:
    """eager_fp32 outputs for `examples`; a non-finite one means the model is broken. Each
    step's time (upload, run, download) is appended to `times` when given."""
    references = []
    for images, context in examples:
        began = time.perf_counter()
        ref = path.execute(reference, images, context)
        if times is not None:
            times.append(time.perf_counter() - began)
        if not all_finite(ref):
            raise NonFiniteOutput(
                "the eager FP32 reference returned NaN or Inf on a random observation: the "
                "model or its weights are broken, so no tier can be checked"
            )
        references.append(ref)
    return references


def check_parity(
    path: StepPath,
    tier: Tier,
    examples: list[Example],
    references: list[list[np.ndarray]],
    rtol: float,
    setting: str = "parity_rtol",
    measure: ParityMeasure | None = None,
) -> tuple[float, float]:
    """Largest relative error against the references (over every output: the chunk and any
    extras), and the median step time (upload, run, download). Raises at the first non-finite
    output or error above `rtol` (the message names `setting`, the option that set it). With
    the policy's own `measure`, its error and tolerance replace the relative error and `rtol`."""
    what = "parity error"
    if measure is not None:
        rtol, what = measure.tolerance, measure.name
        setting = getattr(measure, "setting", f"the policy's {measure.name} tolerance")
    errors, times = [], []
    for index, ((images, context), ref) in enumerate(zip(examples, references, strict=True)):
        began = time.perf_counter()
        out = path.execute(tier, images, context)
        times.append(time.perf_counter() - began)
        if not all_finite(out):
            raise NonFiniteOutput(f"non-finite output on parity observation {index}")
        if measure is not None:
            errors.append(measure.error(context, out, ref))
        else:
            errors.append(max(relative_error(o, r) for o, r in zip(out, ref, strict=True)))
        if errors[-1] > rtol:
            raise ValueError(
                f"{what} {errors[-1]:.2e} exceeds {setting} {rtol:.2g} on observation {index}"
            )
    return max(errors), float(np.median(times))
