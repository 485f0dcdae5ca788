"""`tempo status` and the Prometheus endpoint of a real daemon with a driver streaming."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest

from controller.app import serve
from controller.observe.status_server import request_status
from tests.conftest import StreamingDriver, ipc_config, wait_for

prometheus_parser = pytest.importorskip("prometheus_client.parser")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    port = free_port()
    config = ipc_config(
        tmp_path, "control.rate_hz=100", "metrics.enabled=true", f"metrics.bind=127.0.0.1:{port}"
    )
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=serve,
        args=(config,),
        kwargs={"stop": stop, "on_ready": lambda _: ready.set(), "install_signals": False},
    )
    thread.start()
    assert ready.wait(60)
    driver = StreamingDriver(config.server.bind).start()
    try:
        status_endpoint = config.server.status_bind
        wait_for(lambda: (s := request_status(status_endpoint)) and s["actions_sent"] > 50)
        yield status_endpoint, port
    finally:
        driver.stop()
        stop.set()
        thread.join(10)


def test_status_command_prints_sections_and_json(served):
    status_endpoint, _ = served
    text = subprocess.run(
        [sys.executable, "-m", "controller.cli", "status", "--connect", status_endpoint],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.returncode == 0, text.stderr
    for fragment in ("tier", "missed", "ensembler", "guards", "good"):
        assert fragment in text.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "controller.cli", "status", "--connect", status_endpoint, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    status = json.loads(as_json.stdout)
    sections = status["telemetry"]["sections"]
    assert {"receive", "ensembler", "guards", "send", "tick"} <= set(sections)
    assert status["robots"][0]["robot"] == "good"


def test_metrics_endpoint_exports_histograms_counters_and_gauges(served):
    _, port = served
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    families = {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}
    durations = families["tempo_section_duration_seconds"]
    assert durations.type == "histogram"
    counted = {
        s.labels["section"] for s in durations.samples if s.name.endswith("_count") and s.value > 0
    }
    assert {"ensembler", "guards", "send"} <= counted
    assert any(f.type == "counter" for f in families.values())
    assert any(f.type == "gauge" for f in families.values())
