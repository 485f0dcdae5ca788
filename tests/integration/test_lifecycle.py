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
    (line,) = result.stdout.strip().splitlines()  # stdout holds the JSON object alone
    summary = json.loads(line)
    # ... and the progress goes to stderr: a slow start and a hang do not look alike
    assert "tempo demo: starting the daemon" in result.stderr
    assert "tempo demo: daemon ready in" in result.stderr
    for key in (
        "ticks",
        "achieved_hz",
        "missed_ticks",
        "latency_ms_p50",
        "latency_ms_p99",
        "tick_lateness_us_p99",
    ):
        assert key in summary
    # Without CUDA the demo serves ACT at 10 Hz with a chunk every 10 steps (demo_fit), so a
    # CPU step, even on a loaded machine, lands while the previous chunk still plays.
    from controller.sim.demo_fit import cuda_available

    if not cuda_available():
        assert summary["control_hz"] == 10
        assert "no CUDA GPU" in result.stderr  # --json: the line saying so goes to stderr
        # Counted from the robot's first action, as --seconds is (3 s at 10 Hz, plus the
        # half-second status polls at either end), not from the daemon's ready
        assert summary["ticks"] + summary["missed_ticks"] <= 10 * (3 + 3)
    # The pacer accounts for every period, run or missed (a loaded machine misses some);
    # it never runs faster than the rate.
    assert summary["ticks"] + summary["missed_ticks"] >= 20
    assert 0 < summary["achieved_hz"] <= summary["control_hz"] * 1.05
    # The robot moved: the policy's actions were applied and drove the arm.
    assert summary["robot_loop_actions"] > 0
    assert summary["robot_travel_rad"] > 1e-3
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


# -- binding: before the policy loads, one sentence, exit code 2 --------------------------------


def serve(*overrides: str) -> subprocess.CompletedProcess[str]:
    """`tempo serve` with a checkpoint that does not exist: a bind error must come first."""
    args = [sys.executable, "-m", "controller.cli", "serve"]
    for override in ("policy.kind=checkpoint", "policy.path=/nonexistent/ckpt", *overrides):
        args += ["--set", override]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def assert_refused(result: subprocess.CompletedProcess[str], *says: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tempo: ")]
    assert len(errors) == 1, result.stderr  # (INFO lines may come before it)
    for fragment in says:
        assert fragment in errors[0], errors[0]


def test_an_address_in_use_is_one_sentence_before_the_policy_loads(tmp_path):
    import zmq

    taken = zmq.Context.instance().socket(zmq.ROUTER)
    try:
        taken.bind("tcp://127.0.0.1:*")
        endpoint = taken.getsockopt_string(zmq.LAST_ENDPOINT)
        result = serve(f"server.bind={endpoint}", f"server.status_bind=ipc://{tmp_path}/s.sock")
    finally:
        taken.close(0)
    assert_refused(result, f"cannot bind server.bind {endpoint}", "already in use")


def test_a_bad_ipc_path_is_one_sentence(tmp_path):
    status = f"server.status_bind=ipc://{tmp_path}/s.sock"
    missing = serve(f"server.bind=ipc://{tmp_path}/no/such/dir/t.sock", status)
    assert_refused(missing, f"{tmp_path}/no/such/dir does not exist")
    long = serve(f"server.bind=ipc://{tmp_path}/{'a' * 120}.sock", status)
    assert_refused(long, "limited to 107")
    status_missing = serve(
        f"server.bind=ipc://{tmp_path}/t.sock", f"server.status_bind=ipc://{tmp_path}/x/s.sock"
    )
    assert_refused(status_missing, "server.status_bind", "does not exist")


def test_a_second_daemon_refuses_the_ipc_path_a_live_one_holds(tmp_path):
    with daemon_process(tmp_path) as first:
        second = serve(
            f"server.bind=ipc://{tmp_path}/tempo.sock",
            f"server.status_bind=ipc://{tmp_path}/other-status.sock",
        )
        assert_refused(second, "a running process", "is listening on it")
        # The first daemon still owns its endpoint: a driver gets a session and actions.
        client = client_for(tmp_path)
        client.connect()
        wait_for(lambda: (observe(client), client.receive(0.01))[1].kind == "action")
        client.close()
        assert first.poll() is None


def test_ipv6_loopback_binds(tmp_path):
    import zmq

    from controller.wire.binding import bind
    from controller.wire.sockets import configure_common

    socket = zmq.Context.instance().socket(zmq.ROUTER)
    configure_common(socket)
    try:
        endpoint = bind(socket, "tcp://[::1]:*", "server.bind")
    except Exception as exc:  # a machine without IPv6 loopback: then the sentence says so
        assert "cannot bind server.bind tcp://[::1]:*" in str(exc)
        return
    finally:
        socket.close(0)
    assert endpoint.startswith("tcp://[::1]:")
