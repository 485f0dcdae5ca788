"""The optional /metrics endpoint: config checks, a real scrape parsed as Prometheus text."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from controller.errors import ConfigError
from controller.observe.metrics_export import COARSE_LE_NS
from controller.observe.metrics_http import MetricsConfig, MetricsServer
from controller.observe.telemetry import Telemetry

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

# -- config ----------------------------------------------------------------------------------------


def test_defaults_are_off_and_loopback() -> None:
    config = MetricsConfig()
    assert not config.enabled and config.bind == "127.0.0.1:9464" and not config.allow_remote
    MetricsConfig(bind="[::1]:9000")
    MetricsConfig(bind="localhost:0")


def test_a_remote_bind_is_refused_with_the_reason_unless_allowed() -> None:
    with pytest.raises(ValidationError) as refused:
        MetricsConfig(enabled=True, bind="0.0.0.0:9464")
    text = str(refused.value)
    assert "not a loopback address" in text and "authentication" in text
    assert "allow_remote" in text
    assert MetricsConfig(bind="0.0.0.0:9464", allow_remote=True).allow_remote
    with pytest.raises(ValidationError):
        MetricsConfig(bind="metrics.example.org:9464")  # a name may resolve anywhere


@pytest.mark.parametrize(
    "settings",
    [
        {"bind": "9464"},
        {"bind": "127.0.0.1:99999"},
        {"labels": {"bad-name": "x"}},
        {"labels": {"robot": "x"}},  # Tempo's own label
        {"unknown": True},
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        MetricsConfig(**settings)


# -- a real scrape ---------------------------------------------------------------------------------


SAMPLES_S = np.random.default_rng(0).lognormal(np.log(1.5e-3), 0.8, 2000)


def status() -> dict[str, Any]:
    return {
        "uptime_s": 12.5,
        "control_hz": 50.0,
        "achieved_hz": 49.9,
        "ticks": 625,
        "missed_ticks": 2,
        "actions_sent": 600,
        "holds_sent": 25,
        "inferences": 590,
        "inference_failures": 1,
        "chunks_rejected": 0,
        "messages": 700,
        "send_dropped": 0,
        "protocol_errors": {"shape": 3},
        "guard_interventions": {"velocity_limited": 9, "position_clamped": 0},
        "robots": [
            {
                "robot": "arm-left",
                "last_observation_age_ms": 4.0,
                "guard_state": "hold",
                "guards": {"velocity_limited": 7, "held_ticks": 25},
                "counters": {"observations": 600},
            }
        ],
        "policy": {
            "ready": True,
            "tier": "compiled",
            "device": "cuda:0",
            "tiers": [{"name": "compiled", "precision": "fp16", "state": "ready"}],
            "steps": 590,
            "failed_steps": 1,
            "reruns": 1,
            "overruns": 4,
            "demotions": [{"from_tier": "graph", "to_tier": "compiled", "cause": "overrun"}],
            "promotions": [],
        },
    }


@pytest.fixture()
def scraped() -> Iterator[tuple[str, dict[str, Any]]]:
    telemetry = Telemetry()
    model = telemetry.section("model")
    for value in SAMPLES_S:
        model.record(float(value))
    telemetry.section("tick_lateness").record(4e-6)
    telemetry.counter("demotions", cause="overrun").inc(2)
    telemetry.gauge("queue_depth").set(3)
    server = MetricsServer(
        lambda: telemetry.snapshot(buckets=True),
        status,
        MetricsConfig(enabled=True, bind="127.0.0.1:0", labels={"cell": "lab3"}),
    )
    url = server.start()
    assert url is not None
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
            assert reply.headers["Content-Type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        yield url, families
    finally:
        server.stop()


def samples(family: Any, name: str) -> list[Any]:
    return [s for s in family.samples if s.name == name]


def test_section_histograms_scrape_as_exact_cumulative_buckets(scraped: Any) -> None:
    _, families = scraped
    family = families["tempo_section_duration_seconds"]
    assert family.type == "histogram"
    buckets = samples(family, "tempo_section_duration_seconds_bucket")
    model = {s.labels["le"]: s.value for s in buckets if s.labels["section"] == "model"}
    assert all(s.labels["cell"] == "lab3" for s in buckets)
    recorded = np.asarray([round(v * 1e9) for v in SAMPLES_S])
    for le_ns in COARSE_LE_NS:
        le = next(k for k in model if k != "+Inf" and float(k) == pytest.approx(le_ns / 1e9))
        assert model[le] == (recorded <= le_ns).sum()
    assert model["+Inf"] == len(SAMPLES_S)
    count = samples(family, "tempo_section_duration_seconds_count")[0].value
    total = samples(family, "tempo_section_duration_seconds_sum")[0].value
    assert count == len(SAMPLES_S) and total == pytest.approx(SAMPLES_S.sum(), rel=1e-6)
    lateness = families["tempo_tick_lateness_seconds"]
    assert samples(lateness, "tempo_tick_lateness_seconds_count")[0].value == 1


def test_counters_gauges_robots_and_tier_follow_the_naming_conventions(scraped: Any) -> None:
    _, families = scraped
    assert samples(families["tempo_demotions"], "tempo_demotions_total")[0].value == 2
    assert families["tempo_queue_depth"].samples[0].value == 3
    assert samples(families["tempo_ticks"], "tempo_ticks_total")[0].value == 625
    assert samples(families["tempo_missed_ticks"], "tempo_missed_ticks_total")[0].value == 2
    errors = samples(families["tempo_protocol_errors"], "tempo_protocol_errors_total")
    by_code = {s.labels["code"]: s.value for s in errors}
    assert by_code["shape"] == 3
    assert by_code["non_finite"] == 0 and by_code["malformed"] == 0  # every code, from the start
    totals = samples(
        families["tempo_daemon_guard_interventions"], "tempo_daemon_guard_interventions_total"
    )
    assert {s.labels["guard"]: s.value for s in totals} == {
        "velocity_limited": 9,
        "position_clamped": 0,
    }
    age = families["tempo_robot_last_observation_age_seconds"].samples[0]
    assert age.labels["robot"] == "arm-left" and age.value == pytest.approx(0.004)
    state = {s.labels["state"]: s.value for s in families["tempo_robot_guard_state"].samples}
    assert state == {"ok": 0.0, "hold": 1.0, "stop": 0.0}
    guards = samples(families["tempo_guard_interventions"], "tempo_guard_interventions_total")
    assert [(s.labels["guard"], s.value) for s in guards] == [("velocity_limited", 7)]
    info = families["tempo_policy_tier_info"].samples[0]
    assert info.labels["tier"] == "compiled" and info.labels["precision"] == "fp16"
    assert families["tempo_policy_tier_level"].samples[0].value == 1
    demotions = samples(families["tempo_policy_demotions"], "tempo_policy_demotions_total")
    assert demotions[0].labels == {
        "cell": "lab3",
        "from_tier": "graph",
        "to_tier": "compiled",
        "cause": "overrun",
    }
    assert families["tempo_uptime_seconds"].samples[0].value == 12.5


def test_only_metrics_is_served(scraped: Any) -> None:
    url, _ = scraped
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=5)
    assert missing.value.code == 404


def test_stopped_server_refuses_connections() -> None:
    server = MetricsServer(lambda: {}, None, MetricsConfig(enabled=True, bind="127.0.0.1:0"))
    url = server.start()
    assert url is not None
    server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)


def test_a_failing_status_still_serves_the_histograms() -> None:
    telemetry = Telemetry()
    telemetry.record("model", 0.001)

    def broken() -> dict[str, Any]:
        raise RuntimeError("status failed")

    server = MetricsServer(
        lambda: telemetry.snapshot(buckets=True),
        broken,
        MetricsConfig(enabled=True, bind="127.0.0.1:0"),
    )
    url = server.start()
    assert url is not None
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    finally:
        server.stop()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "tempo_section_duration_seconds" in names and "tempo_ticks" not in names


def test_disabled_starts_nothing_and_the_global_registry_stays_clean() -> None:
    before = set(prometheus_client.REGISTRY._collector_to_names)  # noqa: SLF001
    assert MetricsServer(lambda: {}, None, MetricsConfig()).start() is None
    server = MetricsServer(lambda: {}, None, MetricsConfig(enabled=True, bind="127.0.0.1:0"))
    server.start()
    server.stop()
    assert set(prometheus_client.REGISTRY._collector_to_names) == before  # noqa: SLF001


def test_missing_prometheus_client_is_a_clear_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    server = MetricsServer(lambda: {}, None, MetricsConfig(enabled=True, bind="127.0.0.1:0"))
    with pytest.raises(ConfigError) as refused:
        server.start()
    assert "pip install 'tempo-controller[metrics]'" in str(refused.value)


def test_a_busy_port_is_a_clear_config_error() -> None:
    first = MetricsServer(lambda: {}, None, MetricsConfig(enabled=True, bind="127.0.0.1:0"))
    url = first.start()
    assert url is not None
    port = url.rsplit(":", 1)[1].split("/")[0]
    try:
        second = MetricsServer(
            lambda: {}, None, MetricsConfig(enabled=True, bind=f"127.0.0.1:{port}")
        )
        with pytest.raises(ConfigError, match="metrics.bind"):
            second.start()
    finally:
        first.stop()
