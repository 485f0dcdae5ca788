"""What `tempo profile compare` found: each variant's samples and the verdict (`CompareResult`).

Filled by controller.tools.compare, written out by controller.tools.reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.observe.percentiles import summarize

BOOTSTRAP_RESAMPLES = 2000


@dataclass
class VariantResult:
    name: str
    policy: str
    tier: str
    query_period: int
    ensemble: str
    samples: np.ndarray  # seconds per control step, one per round
    predict: np.ndarray  # seconds per predict_chunk
    tiers: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self, samples: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "policy": self.policy,
            "tier": self.tier,
            "query_period": self.query_period,
            "ensemble": self.ensemble,
            "control_step": summarize(self.samples).as_dict(),
            "predict_chunk": summarize(self.predict).as_dict(),
            "throughput_steps_per_s": 1.0 / float(self.samples.mean()),
            "tiers": self.tiers,
        }
        if samples:
            out["samples_s"] = [float(v) for v in self.samples]
            out["predict_samples_s"] = [float(v) for v in self.predict]
        return out


@dataclass
class CompareResult:
    a: VariantResult
    b: VariantResult
    rounds: int
    window: int
    warmup: int
    source: str
    confidence: float
    min_effect: float
    ratio_median: float  # median(A) / median(B): > 1 means B is faster
    ci_median: tuple[float, float]
    ratio_mean: float
    ci_mean: tuple[float, float]
    difference_median_s: float  # median(B) - median(A)
    verdict: str
    faster: str | None  # "A", "B" or None (no significant difference)
    report: Any = None  # controller.tools.reports.Report when a report was written

    def as_dict(self, samples: bool = True) -> dict[str, Any]:
        return {
            "kind": "tempo-profile-compare",
            "a": self.a.as_dict(samples),
            "b": self.b.as_dict(samples),
            "rounds": self.rounds,
            "window_steps": self.window,
            "warmup_rounds": self.warmup,
            "source": self.source,
            "confidence": self.confidence,
            "min_effect": self.min_effect,
            "ratio_of_medians_a_over_b": self.ratio_median,
            "ratio_of_medians_ci": list(self.ci_median),
            "ratio_of_means_a_over_b": self.ratio_mean,
            "ratio_of_means_ci": list(self.ci_mean),
            "difference_of_medians_s": self.difference_median_s,
            "verdict": self.verdict,
            "faster": self.faster,
            "method": (
                "per round: one window of control steps of A and of B, order alternating; "
                "ratio of medians A/B with a paired percentile bootstrap over rounds "
                f"({BOOTSTRAP_RESAMPLES} resamples)"
            ),
        }
