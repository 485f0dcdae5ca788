"""/metrics per policy (a daemon may serve several, controller.daemon.lanes): each family
labelled `policy` with the policy's name, from the status snapshot's `policies` map."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

# The collector's (metrics_export.TempoCollector): a metric family with its constant labels,
# and a sample's label values after the constant ones.
Family = Callable[[str, str, str, list[str]], Any]
Values = Callable[..., list[str]]

PREFIX = "tempo_"
# (status key, metric name, help): each policy's gauges, then its counters.
GAUGES = (
    ("robots", "policy_robots", "Robots the policy serves."),
    ("load", "policy_load", "Share of the policy's inference time its robots need (admission)."),
    ("max_load", "policy_max_load", "The load past which a hello is refused (execution.max_load)."),
    ("serving", "policy_serving", "1 while the policy answers (0 while its process restarts)."),
)
COUNTERS = (
    ("inferences", "policy_inferences", "Policy steps run for the policy's robots."),
    ("inference_failures", "policy_inference_failures", "The policy's steps that raised."),
    ("actions_sent", "policy_actions_sent", "Actions sent to the policy's robots."),
    ("holds_sent", "policy_holds_sent", "Holds sent to the policy's robots."),
)


def policy_families(family_of: Family, values: Values, policies: dict[str, Any]) -> Iterator[Any]:
    if not policies:
        return
    for kind, table in (("gauge", GAUGES), ("counter", COUNTERS)):
        for key, name, help_text in table:
            family = family_of(kind, PREFIX + name, help_text, ["policy"])
            for policy, entry in sorted(policies.items()):
                value = entry.get(key)
                if isinstance(value, (bool, int, float)):
                    family.add_metric(values(policy), float(value))
            yield family
    steps = family_of(
        "gauge",
        PREFIX + "policy_batch_step_seconds",
        "Measured step time of the policy's serving tier, by batch size.",
        ["policy", "batch"],
    )
    for policy, entry in sorted(policies.items()):
        for size, step_ms in sorted((entry.get("step_ms") or {}).items(), key=lambda i: int(i[0])):
            steps.add_metric(values(policy, size), float(step_ms) / 1e3)
    yield steps
