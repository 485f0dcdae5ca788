"""What `tempo eval` reports of its episodes: the success rate with its 95% Wilson score
interval (a few dozen episodes give a wide one, which is the point of printing it), mean return
and length, and per episode the control loop's figures (holds, missed ticks, latency). As one
JSON document and as a table. Standard library only."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

Z_95 = 1.959963984540054  # the standard normal's 97.5% quantile


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion: unlike the normal approximation it
    stays inside [0, 1] and is not empty at 0 or n successes."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes of {trials} trials is not a proportion")
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def eval_summary(env: str, clock: str, episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The summary of episodes given as EpisodeResult.as_dict() documents."""
    n = len(episodes)
    successes = sum(bool(e["success"]) for e in episodes)
    low, high = wilson_interval(successes, n)
    return {
        "env": env,
        "clock": clock,
        "episodes": n,
        "successes": successes,
        "success_rate": successes / n,
        "success_interval_95": [low, high],
        "return_mean": sum(e["return"] for e in episodes) / n,
        "length_mean": sum(e["length"] for e in episodes) / n,
        "missed_ticks": sum(e["missed_ticks"] for e in episodes),
        "holds": sum(e["holds"] for e in episodes),
        "per_episode": list(episodes),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def eval_table(summary: Mapping[str, Any]) -> str:
    """The episodes, one row each, and the summary line under them."""
    header = ("seed", "success", "return", "length", "holds", "missed", "p50 ms", "p99 ms")
    rows = [
        (
            str(e["seed"]),
            "yes" if e["success"] else "no",
            f"{e['return']:.2f}",
            str(e["length"]),
            str(e["holds"]),
            str(e["missed_ticks"]),
            _ms(e["latency_ms_p50"]),
            _ms(e["latency_ms_p99"]),
        )
        for e in summary["per_episode"]
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True))
        for row in (header, *rows)
    ]
    low, high = summary["success_interval_95"]
    lines.append(
        f"{summary['env']} ({summary['clock']}): success {summary['successes']}/"
        f"{summary['episodes']} = {summary['success_rate']:.0%} (95% Wilson interval "
        f"{low:.0%} to {high:.0%}), mean return {summary['return_mean']:.2f}, mean length "
        f"{summary['length_mean']:.1f}"
    )
    return "\n".join(lines)
