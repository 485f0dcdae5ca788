"""What the measurement scripts share: a percentile that may have no samples, two relative
errors, and an aligned table. Whole summaries of timings are the package's own
(controller.observe.percentiles.summarize; `tempo bench`'s JSON keys in
controller.tools.bench_policy.percentiles_ms), not redone here.

Two relative errors, on purpose, each with the meaning its callers' tolerances were set in:

    relative_error(ours, ref)      ||ours - ref|| / ||ref||, the whole chunk's error: the package's
                                   own (controller.inference.parity), which the tiers' start-up
                                   checks use; rtc_exact_parity, bench_quant, gpu_checks.
    max_relative_error(ours, ref)  max|ours - ref| / max|ref|, the worst single value against the
                                   reference's largest: the parity checks against LeRobot
                                   (check_lerobot_parity, check_pi0_parity) state theirs so.

Both take numpy arrays or torch tensors (any device, any dtype) and compute in float64.

This module imports no torch: the fleet's robot processes and the soak's driver use it and stay
light (the norm ratio's import of the package's parity module, which does, waits for a call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _float64(values: Any) -> np.ndarray:
    """A numpy float64 copy of an array or of a torch tensor (detached, on the host; BF16 too,
    which numpy cannot read directly)."""
    if hasattr(values, "detach"):
        values = values.detach().double().cpu().numpy()
    return np.asarray(values, dtype=np.float64)


def relative_error(ours: Any, reference: Any) -> float:
    """||ours - reference|| / ||reference|| (absolute when the reference is all zeros)."""
    from controller.inference.parity import relative_error as norm_ratio

    return norm_ratio(_float64(ours), _float64(reference))


def max_relative_error(ours: Any, reference: Any) -> float:
    """max|ours - reference| / max|reference|; infinite where either holds a NaN or an Inf, where
    the reference is all zeros, or where either is empty (a check that compares nothing proves
    nothing)."""
    a, b = _float64(ours), _float64(reference)
    if a.size == 0 or b.size == 0 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("inf")
    scale = np.abs(b).max()
    if scale == 0:
        return float("inf")
    return float(np.abs(a - b).max() / scale)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) of `values`, interpolated as summarize's; None with none."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else None


def shown(value: Any) -> str:
    """A table cell: "-" for nothing, floats to 2 decimals (1 from 10 up), dicts as k:v pairs,
    lists comma-joined."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, dict):
        return " ".join(f"{k}:{shown(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ",".join(shown(v) for v in value)
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """`rows` as right-aligned columns under their headings, (heading, key) each; a missing key
    shows as "-"."""
    cells = [[heading for heading, _ in columns]]
    cells += [[shown(row.get(key)) for _, key in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
        for line in cells
    )
