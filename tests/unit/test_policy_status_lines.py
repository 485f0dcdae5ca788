"""Each policy in `tempo status` (a line: robots, rate, load) and in /metrics (series labelled
`policy`), from a status snapshot's `policies` map."""

from __future__ import annotations

from typing import Any

import pytest

from controller.observe.status_policies import policy_load_lines

POLICIES: dict[str, Any] = {
    "act": {
        "robots": 16,
        "rate_hz": 50.0,
        "query_hz": 50.0,
        "load": 0.93,
        "max_load": 0.9,
        "serving": True,
        "step_ms": {"1": 1.0, "16": 1.16},
        "inferences": 12,
        "actions_sent": 40,
        "policy": {"tier": "graph"},
    },
    "pi0": {
        "robots": 1,
        "rate_hz": 50.0,
        "query_hz": 10.0,
        "load": None,
        "max_load": None,
        "serving": False,
        "policy": {},
    },  # fmt: skip
}


def test_a_line_per_policy_with_robots_rate_and_load():
    assert policy_load_lines(POLICIES) == [
        "policy act: 16 robots at 50 Hz (queried at 50 Hz), load 0.93 of 0.90 (graph), serving",
        "policy pi0: 1 robot at 50 Hz (queried at 10 Hz), load not measured yet, "
        "not serving (restarting)",
    ]
    assert policy_load_lines(None) == []  # an older daemon's status


def test_metrics_label_each_policys_series():
    pytest.importorskip("prometheus_client")
    from prometheus_client.core import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from controller.observe.metrics_export import TempoCollector

    registry = CollectorRegistry()
    registry.register(TempoCollector(lambda: {}, lambda: {"policies": POLICIES}))
    text = generate_latest(registry).decode()
    assert 'tempo_policy_robots{policy="act"} 16.0' in text
    assert 'tempo_policy_load{policy="act"} 0.93' in text
    assert 'tempo_policy_load{policy="pi0"}' not in text  # not measured: no sample
    assert 'tempo_policy_serving{policy="pi0"} 0.0' in text
    assert 'tempo_policy_actions_sent_total{policy="act"} 40.0' in text
    assert 'tempo_policy_batch_step_seconds{batch="16",policy="act"} 0.00116' in text
