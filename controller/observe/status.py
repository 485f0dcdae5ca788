"""The daemon's status snapshot: what `tempo status`, the demo, /metrics and the scripts read.

Every duration in it comes from the telemetry histograms (recorded once, on the path itself);
`recorded_figures` turns the sections a person looks at first into flat fields. With
`telemetry.enabled=false` nothing is recorded and those fields are None.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any

from controller.observe.section_names import INFERENCE, OBS_TO_ACTION, TICK_LATENESS

# (flat field prefix, section, unit in seconds): the headline figures of a status snapshot.
HEADLINE = (
    ("tick_lateness_us", TICK_LATENESS, 1e-6),
    ("obs_to_action_ms", OBS_TO_ACTION, 1e-3),
    ("inference_ms", INFERENCE, 1e-3),
)


def recorded_figures(telemetry: Mapping[str, Any]) -> dict[str, float | None]:
    """p50, p99 and max of the headline sections of a telemetry snapshot, whole run."""
    sections = telemetry.get("sections") or {}
    out: dict[str, float | None] = {}
    for prefix, name, unit in HEADLINE:
        entry = sections.get(name) or {}
        for stat in ("p50", "p99", "max"):
            value = entry.get(f"{stat}_s")
            out[f"{prefix}_{stat}"] = None if value is None else value / unit
    return out


def guard_totals(
    closed: Mapping[str, int], open_counts: Iterable[Mapping[str, int]]
) -> dict[str, int]:
    """Guard interventions of every robot ever served: ended sessions plus connected ones."""
    totals = collections.Counter(closed)
    for counts in open_counts:
        totals.update(counts)
    return dict(totals)


def json_safe(value: Any) -> Any:
    """NaN (a percentile of no samples) is not JSON: it becomes null, in nested dicts and
    lists too (`tempo status --json`, `tempo demo --json`)."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value
