"""The Prometheus view of Tempo's telemetry and status: a prometheus_client custom collector.

`TempoCollector` turns a telemetry snapshot (with buckets) and the daemon's status dict into
metric families at scrape time; `controller.observe.metrics_http` serves it. Names and units
follow the Prometheus conventions (base units, `_total` counters); the list is in
metrics_http's docstring.
prometheus_client is imported only when a collector is made.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from controller.errors import ErrorCode
from controller.observe.histogram import coarse_cumulative
from controller.observe.metrics_policies import policy_families

log = logging.getLogger(__name__)

PREFIX = "tempo_"
COARSE_LE_NS: list[int] = [
    m * 10**e
    for e in range(4, 10)
    for m in (1, 2, 5)  # 10 us .. 5 s
] + [10**10]  # 10 s
"""Upper bounds (ns) of the exported buckets; each is one of the fine histogram bounds."""

SPECIAL_HISTOGRAMS = {
    "tick_lateness": ("tick_lateness_seconds", "How late each control tick started."),
    "obs_to_action": (
        "observation_to_action_seconds",
        "Observation received -> first action sent from the chunk it produced.",
    ),
}
TIER_LEVEL = {"graph": 0, "compiled": 1, "eager_half": 2, "eager_fp32": 3}
# The flight recorder's counters: (metric name, help, key in the recorder's status).
RECORDING_COUNTERS = (
    ("recording_records_written", "Records the flight recorder wrote to files.", "written"),
    ("recording_incidents", "Ring recordings written on a mark or a guard stop.", "incidents"),
    (
        "recording_files_deleted",
        "Oldest continuous recordings deleted to stay within record.max_total_mb.",
        "files_deleted",
    ),
    (
        "recording_deleted_bytes",
        "Bytes of the recordings deleted to stay within record.max_total_mb.",
        "bytes_deleted",
    ),
    (
        "recording_not_json",
        "Records left out because they held a value JSON cannot hold (a NaN in memory).",
        "not_json",
    ),
)


# -- the collector --------------------------------------------------------------------------------


def _metric_name(name: str) -> str:
    return PREFIX + re.sub(r"[^a-zA-Z0-9_]", "_", name)


class TempoCollector:
    """A prometheus_client custom collector over the telemetry snapshot and the status dict."""

    def __init__(
        self,
        telemetry_snapshot: Callable[[], dict[str, Any]],
        status: Callable[[], dict[str, Any]] | None,
        const_labels: dict[str, str] | None = None,
        le_ns: list[int] | None = None,
    ) -> None:
        self._snapshot = telemetry_snapshot
        self._status = status
        self._const = dict(const_labels or {})
        self._le_ns = list(le_ns or COARSE_LE_NS)
        from prometheus_client.utils import floatToGoString

        self._le_text = [floatToGoString(ns / 1e9) for ns in self._le_ns] + ["+Inf"]

    def collect(self) -> Iterator[Any]:
        try:
            snapshot = self._snapshot()
        except Exception:
            log.exception("metrics: the telemetry snapshot failed")
            snapshot = {}
        yield from self._histograms(snapshot.get("sections") or {})
        yield from self._telemetry_scalars(snapshot)
        if self._status is not None:
            try:
                status = self._status()
            except Exception:
                log.exception("metrics: the status snapshot failed")
                status = {}
            if status and "error" not in status:
                yield from self._daemon(status)
                yield from self._robots(status.get("robots") or [])
                yield from self._policy(status.get("policy") or {})
                yield from policy_families(self._family, self._values, status.get("policies") or {})

    # families with the constant labels first ------------------------------------------------------

    def _family(self, kind: str, name: str, help_text: str, labels: Iterable[str] = ()) -> Any:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        cls = {
            "counter": CounterMetricFamily,
            "gauge": GaugeMetricFamily,
            "histogram": HistogramMetricFamily,
        }[kind]
        return cls(name, help_text, labels=[*self._const, *labels])

    def _values(self, *values: Any) -> list[str]:
        return [*self._const.values(), *(str(v) for v in values)]

    def _histograms(self, sections: dict[str, Any]) -> Iterator[Any]:
        extra = sorted(
            {k for s in sections.values() for k in (s.get("labels") or {}) if k != "section"}
        )
        generic = self._family(
            "histogram",
            PREFIX + "section_duration_seconds",
            "Time spent in each named section of the control path (see `section`).",
            ["section", *extra],
        )
        special: dict[str, Any] = {}
        for entry in sections.values():
            sparse = entry.get("buckets")
            if sparse is None:
                continue  # a snapshot without buckets (status form): nothing exact to export
            cumulative, total = coarse_cumulative(sparse, self._le_ns)
            buckets = list(zip(self._le_text, [*cumulative, total], strict=True))
            labels = entry.get("labels") or {}
            name = entry.get("name", "")
            if name in SPECIAL_HISTOGRAMS and not labels:
                metric, help_text = SPECIAL_HISTOGRAMS[name]
                family = special[name] = self._family("histogram", PREFIX + metric, help_text)
                family.add_metric(self._values(), buckets, entry.get("sum_s", 0.0))
            else:
                values = self._values(name, *(labels.get(k, "") for k in extra))
                generic.add_metric(values, buckets, entry.get("sum_s", 0.0))
        if generic.samples:
            yield generic
        yield from special.values()

    def _telemetry_scalars(self, snapshot: dict[str, Any]) -> Iterator[Any]:
        for kind, entries in (
            ("counter", snapshot.get("counters") or {}),
            ("gauge", snapshot.get("gauges") or {}),
        ):
            families: dict[str, tuple[Any, list[str]]] = {}
            for entry in entries.values():
                label_names = sorted(entry.get("labels") or {})
                name = _metric_name(entry["name"])
                key = f"{name}|{','.join(label_names)}"
                if key not in families:
                    help_text = f"Telemetry {kind} {entry['name']}."
                    families[key] = (self._family(kind, name, help_text, label_names), label_names)
                family, names = families[key]
                labels = entry.get("labels") or {}
                family.add_metric(self._values(*(labels[k] for k in names)), entry["value"])
            for family, _ in families.values():
                yield family

    def _scalar(self, kind: str, name: str, help_text: str, value: Any) -> Iterator[Any]:
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, (int, float)):
            family = self._family(kind, PREFIX + name, help_text)
            family.add_metric(self._values(), float(value))
            yield family

    def _daemon(self, status: dict[str, Any]) -> Iterator[Any]:
        gauges = (
            ("uptime_seconds", "Seconds since the control loop started.", "uptime_s"),
            ("control_rate_target_hertz", "Configured control rate.", "control_hz"),
            ("control_rate_achieved_hertz", "Ticks per second since start.", "achieved_hz"),
        )
        for name, help_text, key in gauges:
            yield from self._scalar("gauge", name, help_text, status.get(key))
        counters = (
            ("ticks", "Control ticks run.", "ticks"),
            ("missed_ticks", "Ticks skipped because the loop woke a period late.", "missed_ticks"),
            ("actions_sent", "Actions sent to drivers.", "actions_sent"),
            ("holds_sent", "Holds sent to drivers.", "holds_sent"),
            ("inferences", "Policy steps run for the robots.", "inferences"),
            ("inference_failures", "Policy steps that raised.", "inference_failures"),
            ("chunks_rejected", "Chunks refused (wrong shape or not finite).", "chunks_rejected"),
            ("messages_received", "Messages received from drivers.", "messages"),
            ("send_dropped", "Messages not sent (peer gone or queue full).", "send_dropped"),
        )
        for name, help_text, key in counters:
            yield from self._scalar("counter", name, help_text, status.get(key))
        errors = status.get("protocol_errors")
        if isinstance(errors, dict):
            # Every code from the start (0 until it happens), so an alert rule has a series.
            family = self._family(
                "counter", PREFIX + "protocol_errors", "Refused driver messages by code.", ["code"]
            )
            counts = {code.value: 0 for code in ErrorCode} | dict(errors)
            for code, count in sorted(counts.items()):
                family.add_metric(self._values(code), count)
            yield family
        recording = status.get("recording")
        if isinstance(recording, dict):
            yield from self._recording(recording)
        totals = status.get("guard_interventions")
        if isinstance(totals, dict):
            family = self._family(
                "counter",
                PREFIX + "daemon_guard_interventions",
                "Actions changed or vetoed by a guard, by guard, over every robot since start "
                "(robots that disconnected included).",
                ["guard"],
            )
            for guard, count in sorted(totals.items()):
                family.add_metric(self._values(guard), count)
            yield family

    def _recording(self, recording: dict[str, Any]) -> Iterator[Any]:
        """The flight recorder's counters (controller.record)."""
        for name, help_text, key in RECORDING_COUNTERS:
            yield from self._scalar("counter", name, help_text, recording.get(key))
        dropped = recording.get("dropped")
        if isinstance(dropped, dict):
            family = self._family(
                "counter",
                PREFIX + "recording_dropped",
                "Records dropped because the recorder's queue was full, by kind.",
                ["kind"],
            )
            for kind, count in sorted(dropped.items()):
                family.add_metric(self._values(kind), count)
            yield family

    def _robots(self, robots: list[dict[str, Any]]) -> Iterator[Any]:
        connected = self._family("gauge", PREFIX + "robots_connected", "Connected robots.")
        connected.add_metric(self._values(), len(robots))
        yield connected
        age = self._family(
            "gauge",
            PREFIX + "robot_last_observation_age_seconds",
            "Seconds since the robot's last observation arrived.",
            ["robot"],
        )
        state = self._family(
            "gauge",
            PREFIX + "robot_guard_state",
            "Watchdog state (1 = current).",
            ["robot", "state"],
        )
        interventions = self._family(
            "counter",
            PREFIX + "guard_interventions",
            "Actions changed or vetoed by a guard, by guard.",
            ["robot", "guard"],
        )
        held = self._family(
            "counter", PREFIX + "robot_held_ticks", "Ticks the robot was told to hold.", ["robot"]
        )
        events = self._family(
            "counter", PREFIX + "robot_events", "Per-robot session counters.", ["robot", "event"]
        )
        for robot in robots:
            name = str(robot.get("robot", ""))
            seconds = robot.get("last_observation_age_ms")
            if seconds is not None:
                age.add_metric(self._values(name), seconds / 1e3)
            for candidate in ("ok", "hold", "stop"):
                current = 1.0 if robot.get("guard_state") == candidate else 0.0
                state.add_metric(self._values(name, candidate), current)
            for guard, count in sorted((robot.get("guards") or {}).items()):
                if guard == "held_ticks":
                    held.add_metric(self._values(name), count)
                else:
                    interventions.add_metric(self._values(name, guard), count)
            for event, count in sorted((robot.get("counters") or {}).items()):
                events.add_metric(self._values(name, event), count)
        yield from (age, state, interventions, held, events)

    def _policy(self, policy: dict[str, Any]) -> Iterator[Any]:
        if not policy:
            return
        tier = policy.get("tier")
        yield from self._scalar(
            "gauge", "policy_ready", "1 once the runner serves.", bool(policy.get("ready"))
        )
        if tier:
            reports = {t.get("name"): t for t in policy.get("tiers") or []}
            info = self._family(
                "gauge",
                PREFIX + "policy_tier_info",
                "The serving tier (value 1).",
                ["tier", "precision", "device"],
            )
            precision = (reports.get(tier) or {}).get("precision", "")
            info.add_metric(self._values(tier, precision, policy.get("device", "")), 1.0)
            yield info
            if tier in TIER_LEVEL:
                yield from self._scalar(
                    "gauge",
                    "policy_tier_level",
                    "Serving tier: 0 graph, 1 compiled, 2 eager_half, 3 eager_fp32.",
                    TIER_LEVEL[tier],
                )
        steps = self._family(
            "counter", PREFIX + "policy_steps", "Runner steps by outcome.", ["outcome"]
        )
        for outcome in ("steps", "failed_steps", "reruns", "overruns"):
            if isinstance(policy.get(outcome), int):
                steps.add_metric(self._values(outcome), policy[outcome])
        yield steps
        demotions = self._family(
            "counter",
            PREFIX + "policy_demotions",
            "Tier changes since start (cause repromoted: back up).",
            ["from_tier", "to_tier", "cause"],
        )
        counted: dict[tuple[str, str, str], int] = {}
        for change in [*(policy.get("demotions") or []), *(policy.get("promotions") or [])]:
            key = (
                str(change.get("from_tier")),
                str(change.get("to_tier")),
                str(change.get("cause")),
            )
            counted[key] = counted.get(key, 0) + 1
        for key, count in sorted(counted.items()):
            demotions.add_metric(self._values(*key), count)
        yield demotions
