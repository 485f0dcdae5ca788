"""`tempo eval --plot PATH`: the episodes of a summary (controller.sim.eval_summary) as one
figure: each episode's return, coloured by success, the success rate with its 95% interval in
the title, and the observation-to-action latency (p50, p99) and holds per episode below.
matplotlib (the `plot` extra) is imported when called; without it, one sentence."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.errors import ConfigError


def check_plot_installed() -> None:
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        raise ConfigError(
            "tempo eval --plot needs matplotlib, which is not installed: "
            "pip install 'tempo-controller[plot]'"
        ) from None


def write_eval_plot(summary: Mapping[str, Any], path: Path) -> None:
    """The figure of `summary`, as PNG (or what `path`'s suffix names) at `path`."""
    check_plot_installed()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    episodes = summary["per_episode"]
    seeds = [str(e["seed"]) for e in episodes]
    low, high = summary["success_interval_95"]
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(max(6.0, 0.25 * len(seeds)), 6), sharex=True
    )
    colours = ["tab:green" if e["success"] else "tab:red" for e in episodes]
    top.bar(seeds, [e["return"] for e in episodes], color=colours)
    top.set_ylabel("return")
    top.set_title(
        f"{summary['env']} ({summary['clock']}): success {summary['successes']}/"
        f"{summary['episodes']} = {summary['success_rate']:.0%} (95% {low:.0%} to {high:.0%}); "
        "green: success"
    )
    for key, label in (("latency_ms_p50", "latency p50"), ("latency_ms_p99", "latency p99")):
        values = [float("nan") if e[key] is None else e[key] for e in episodes]
        bottom.plot(seeds, values, marker="o", label=f"{label} (ms)")
    bottom.plot(seeds, [e["holds"] for e in episodes], marker="x", label="holds (frames)")
    bottom.set_xlabel("seed")
    bottom.legend(loc="upper right", fontsize="small")
    if len(seeds) > 20:
        bottom.tick_params(axis="x", labelrotation=90, labelsize="x-small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
