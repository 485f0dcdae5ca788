"""`--report DIR`: the profile or comparison as JSON, and plots a person would rather look at.

    write_profile_report(result, DIR)   -> DIR/profile.json, DIR/profile_cdf.png,
                                           DIR/profile_breakdown.png
    write_compare_report(result, DIR)   -> DIR/compare.json, DIR/compare_cdf.png,
                                           DIR/compare_rounds.png

The JSON (every figure of the table, plus the raw samples in seconds) is always written. The
plots need matplotlib, an optional extra (`pip install 'tempo-controller[plot]'`); without it the
report says so and returns the JSON alone. Plots: latency CDFs on a log time axis, one line per
section (profile) or per variant (compare); the profile's shares as bars; and the compare's
per-round times in run order, where drift or a demotion shows as a step.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from controller.tools.compare_result import CompareResult
from controller.tools.profile_result import ProfileResult

log = logging.getLogger(__name__)

PLOT_HINT = "pip install 'tempo-controller[plot]'"


class Report:
    """What was written: `files`, and `note` when plots were skipped (and why)."""

    def __init__(self, files: list[Path], note: str = "") -> None:
        self.files = files
        self.note = note

    def __str__(self) -> str:
        text = "report: " + ", ".join(str(f) for f in self.files)
        return text + (f"\n{self.note}" if self.note else "")


def _pyplot() -> Any | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _no_plots(directory: Path) -> str:
    return f"plots skipped: matplotlib is not installed ({PLOT_HINT}); the JSON is in {directory}"


def _write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return path


def _cdf(ax: Any, samples: np.ndarray, label: str) -> None:
    ordered = np.sort(samples[samples > 0]) * 1e3
    if ordered.size == 0:
        return
    ax.plot(
        ordered, np.arange(1, ordered.size + 1) / ordered.size, label=label, drawstyle="steps-post"
    )


def _finish_cdf(ax: Any, title: str) -> None:
    ax.set_xscale("log")
    ax.set_xlabel("time, ms (log scale)")
    ax.set_ylabel("fraction of samples <= x")
    ax.axhline(0.5, color="0.8", linewidth=0.8)
    ax.axhline(0.99, color="0.8", linewidth=0.8)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def write_profile_report(result: ProfileResult, directory: Path) -> Report:
    directory.mkdir(parents=True, exist_ok=True)
    files = [_write_json(directory / "profile.json", result.as_dict())]
    plt = _pyplot()
    if plt is None:
        report = Report(files, _no_plots(directory))
        log.info("%s", report.note)
        return report
    fig, ax = plt.subplots(figsize=(9, 5))
    for row in result.rows:
        if not row.derived and row.key != "forward":
            _cdf(ax, row.samples, f"{row.label} [{row.measured}]")
    _finish_cdf(ax, f"{result.policy} on {result.device}, tier {result.tier}")
    fig.tight_layout()
    files.append(directory / "profile_cdf.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    shares = [(r.label, result.share(r.key) or 0.0, r.group) for r in result.rows if r.share_of]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(shares) + 1.5))
    colors = {"step": "tab:blue", "model": "tab:orange", "tick": "tab:green"}
    labels = [label for label, _, _ in shares]
    ax.barh(
        range(len(shares)),
        [100 * s for _, s, _ in shares],
        color=[colors[g] for _, _, g in shares],
    )
    ax.set_yticks(range(len(shares)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(
        "% of mean (blue: of the policy step, orange: of the eager forward, "
        "green: of the control period)",
        fontsize=8,
    )
    ax.set_title("where the time goes", fontsize=9)
    fig.tight_layout()
    files.append(directory / "profile_breakdown.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)
    return Report(files)


def write_compare_report(result: CompareResult, directory: Path) -> Report:
    directory.mkdir(parents=True, exist_ok=True)
    files = [_write_json(directory / "compare.json", result.as_dict())]
    plt = _pyplot()
    if plt is None:
        report = Report(files, _no_plots(directory))
        log.info("%s", report.note)
        return report
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for variant in (result.a, result.b):
        _cdf(axes[0], variant.samples, f"{variant.name}: control step")
        _cdf(axes[1], variant.predict, f"{variant.name}: predict_chunk")
    _finish_cdf(axes[0], f"per control step (window of {result.window})")
    _finish_cdf(axes[1], "policy step")
    fig.suptitle(result.verdict, fontsize=9)
    fig.tight_layout()
    files.append(directory / "compare_cdf.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(12, 4))
    for variant in (result.a, result.b):
        ax.plot(variant.samples * 1e3, ".", markersize=3, label=variant.name)
    ax.set_xlabel("round (run order)")
    ax.set_ylabel("ms per control step")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("every round, in order: drift, warm-up or a demotion shows as a step", fontsize=9)
    fig.tight_layout()
    files.append(directory / "compare_rounds.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)
    return Report(files)
