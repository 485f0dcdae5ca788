"""The daemon as a process: SIGTERM, restart with a connected driver, and the demo command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from controller.wire.client import TempoClient
from tests.conftest import daemon_process, wait_for

JOINTS = [f"joint_{i}" for i in range(6)]


def client_for(tmp_path, **kwargs) -> TempoClient:
    return TempoClient(
        f"ipc://{tmp_path}/tempo.sock", "arm0", JOINTS, {"front": (96, 128)}, 6, **kwargs
    )


def observe(client: TempoClient) -> None:
    client.send_observation({"front": np.zeros((96, 128, 3), np.uint8)}, np.zeros(6, np.float32))


def test_sigterm_sends_hold_and_exits_cleanly(tmp_path):
    with daemon_process(tmp_path) as process:
        client = client_for(tmp_path)
        client.connect()
        wait_for(lambda: (observe(client), client.receive(0.01))[1].kind == "action")
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        hold = wait_for(lambda: (c := client.receive(0.01)).reason == "daemon_stopping" and c)
        assert hold.kind == "hold"
        assert process.wait(5) == 0
        # Well under a second on an idle machine; the bound must hold on a loaded one too
        # (a shutdown that hangs is caught by wait(5) above).
        assert time.monotonic() - started < 4.0
        client.close()


def test_daemon_restart_client_reconnects_without_old_actions(tmp_path):
    client = client_for(tmp_path, silence_reconnect_s=0.5, handshake_timeout_s=1.0)
    with daemon_process(tmp_path):
        client.connect()
        first_session = client.welcome.session
        wait_for(lambda: (observe(client), client.receive(0.01))[1].kind == "action")
    # The daemon was killed (SIGKILL, no goodbye). Start a new one on the same endpoint.
    with daemon_process(tmp_path):

        def reconnected_action():
            observe(client)
            command = client.receive(0.01)
            return (
                client.welcome is not None
                and client.welcome.session != first_session
                and command.kind == "action"
                and command
            )

        action = wait_for(reconnected_action, timeout=10)
        assert client.counters.reconnects >= 1
        # Steps restart with the new daemon; the action belongs to the new session.
        assert action.step < 1000
    client.close()


def test_demo_json_smoke(tmp_path):
    # The demo makes its ACT checkpoint on first run, under the cache directory.
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "demo", "--seconds", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    for key in (
        "ticks",
        "achieved_hz",
        "missed_ticks",
        "latency_ms_p50",
        "latency_ms_p99",
        "tick_lateness_us_p99",
    ):
        assert key in summary
    # The pacer accounts for every period, run or missed (a loaded machine misses some);
    # it never runs faster than the rate.
    assert summary["ticks"] + summary["missed_ticks"] > 100
    assert 0 < summary["achieved_hz"] <= 50 * 1.05
    assert summary["actions_applied"] > 0
    assert summary["policy_tier"] == "eager_fp32"  # the CPU default (runner.top_tier auto)
    assert (tmp_path / "tempo" / "demo-act" / "model.safetensors").exists()


def test_demo_shows_the_daemons_log_and_prints_strict_json(tmp_path):
    """--log-level INFO shows the daemon's own log lines; --seconds 0 --json is valid JSON
    (no samples: null, not NaN)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    command = [sys.executable, "-m", "controller.cli", "demo", "--seconds", "0", "--json"]
    result = subprocess.run(
        [*command, "--log-level", "INFO", "--policy", "reach"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the JSON summary: {line}")

    summary = json.loads(line, parse_constant=refuse)
    assert summary["latency_ms_p50"] is None
    assert "INFO controller.app: ready: serving reach" in result.stderr
    assert "INFO controller.app: execution:" in result.stderr
