"""What `tempo profile` measured: rows of samples and how each was measured (`ProfileResult`).

Shared by controller.tools.profiling (which fills it), controller.tools.profile_view (advice and
the table) and controller.tools.reports (JSON and plots).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.observe.percentiles import summarize


@dataclass
class Row:
    """One line of the breakdown: samples in seconds and how they were measured."""

    key: str
    label: str
    group: str  # step | model | tick
    samples: np.ndarray
    measured: str
    share_of: str | None = None  # key of the row that is 100%, or "period"
    derived: bool = False  # a difference of means: only the mean is meaningful

    @property
    def mean(self) -> float:
        return float(self.samples.mean()) if self.samples.size else float("nan")

    def as_dict(self, samples: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "label": self.label,
            "group": self.group,
            "measured": self.measured,
            "share_of": self.share_of,
            "derived": self.derived,
            **summarize(self.samples).as_dict(),
        }
        if samples:
            out["samples_s"] = [float(v) for v in self.samples]
        return out


@dataclass
class ProfileResult:
    policy: str
    device: str
    tier: str
    precision: str
    channels_last: bool | None
    top_tier_setting: str
    step_budget_ms: float | None
    iterations: int
    warmup: int
    source: str
    control_hz: float
    query_period: int
    n_cameras: int
    frame_bytes: int
    rows: list[Row] = field(default_factory=list)
    tiers: list[dict[str, Any]] = field(default_factory=list)
    demotions: list[dict[str, Any]] = field(default_factory=list)
    uncalled_children: list[str] = field(default_factory=list)
    flow: dict[str, Any] | None = None  # a flow policy: rtc_mode, chunk_size, n_steps
    recommendations: list[str] = field(default_factory=list)
    torch_trace: str | None = None
    report: Any = None  # controller.tools.reports.Report when a report was written

    def row(self, key: str) -> Row | None:
        return next((r for r in self.rows if r.key == key), None)

    def share(self, key: str) -> float | None:
        """Mean of row `key` as a fraction of the mean of the row (or period) it is a share of."""
        row = self.row(key)
        if row is None or row.share_of is None:
            return None
        if row.share_of == "period":
            whole = 1.0 / self.control_hz
        else:
            parent = self.row(row.share_of)
            if parent is None:
                return None
            whole = parent.mean
        return row.mean / whole if whole > 0 else None

    def as_dict(self, samples: bool = True) -> dict[str, Any]:
        return {
            "kind": "tempo-profile",
            "policy": self.policy,
            "device": self.device,
            "tier": self.tier,
            "precision": self.precision,
            "channels_last": self.channels_last,
            "top_tier_setting": self.top_tier_setting,
            "step_budget_ms": self.step_budget_ms,
            "iterations": self.iterations,
            "warmup": self.warmup,
            "source": self.source,
            "control_hz": self.control_hz,
            "query_period": self.query_period,
            "n_cameras": self.n_cameras,
            "frame_bytes": self.frame_bytes,
            "rows": [r.as_dict(samples) | {"share": self.share(r.key)} for r in self.rows],
            "tiers": self.tiers,
            "demotions_during_profile": self.demotions,
            "uncalled_children": self.uncalled_children,
            "flow": self.flow,
            "recommendations": self.recommendations,
            "torch_trace": self.torch_trace,
        }


def rtc_phase_rows(
    mode: str,
    loop: np.ndarray,
    steps: np.ndarray,
    vjp: np.ndarray,
    fwd: np.ndarray,
    steps_name: str,
) -> list[Row]:
    """The two derived RTC rows, per sample: autograd is what n VJPs cost beyond n forward
    calls of the denoiser; guidance is the rest of the RTC loop beyond the plain denoising
    (`steps`, called `steps_name` in the row's note) and autograd."""
    autograd = np.clip(vjp - fwd, 0.0, None)
    guidance = loop - steps - autograd
    return [
        Row(
            "phase:guidance",
            f"guidance ({mode})",
            "phases",
            guidance,
            f"derived: RTC loop - {steps_name} - autograd",
            "phase:total",
            derived=True,
        ),
        Row(
            "phase:autograd",
            "autograd correction (VJP beyond a forward)",
            "phases",
            autograd,
            "derived: n VJPs - n expert calls",
            "phase:total",
            derived=True,
        ),
    ]
