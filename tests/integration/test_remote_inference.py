"""The remote inference link on loopback: a daemon with `policy.remote` served by a
`tempo infer-server` (the reach policy on the CPU), refused with a wrong server key, holding
while the server is down and served again once it is back. The daemon's side loads no torch."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import zmq

from controller.observe.status_server import request_status
from controller.observe.status_view import render_status
from controller.wire.keys import generate_keys
from tests.conftest import StreamingDriver, daemon_process, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keys(tmp_path: Path) -> dict[str, Path]:
    """The server's key pair, a daemon's, and the server's allowlist holding the daemon's."""
    server_public, server_secret = generate_keys(tmp_path / "server", "server")
    robot_public, robot_secret = generate_keys(tmp_path / "robot", "robot")
    other_public, _ = generate_keys(tmp_path / "other", "other")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / robot_public.name).write_bytes(robot_public.read_bytes())
    return {
        "server_public": server_public,
        "server_secret": server_secret,
        "robot_secret": robot_secret,
        "allowed": allowed,
        "other_public": other_public,
    }


@contextmanager
def infer_server(tmp_path: Path, keys: dict[str, Path], port: int) -> Iterator[subprocess.Popen]:
    args = [
        sys.executable, "-m", "controller.cli", "infer-server",
        "--bind", f"tcp://127.0.0.1:{port}", "--log-level", "INFO",
        "--set", f"security.server_secret_key={keys['server_secret']}",
        "--set", f"security.authorized_keys={keys['allowed']}",
    ]  # fmt: skip
    log = open(tmp_path / f"server-{time.monotonic_ns()}.log", "w")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def _remote(
    keys: dict[str, Path], port: int, server_key: str = "server_public", standby: str = "off"
) -> list[str]:
    return [
        f"policy.remote.address=tcp://127.0.0.1:{port}",
        f"policy.remote.server_key={keys[server_key]}",
        f"policy.remote.client_key={keys['robot_secret']}",
        "policy.remote.timeout_s=1.0",
        f"supervision.standby={standby}",
    ]


def _status(tmp_path: Path) -> dict:
    status = request_status(f"ipc://{tmp_path}/status.sock", 2.0)
    assert status is not None
    return status


def _actions(records: list) -> int:
    return sum(r.kind == "action" for r in records)


def _libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("standby", ["off", "spare"])
def test_a_daemon_is_served_by_a_remote_server_holds_while_it_is_down_and_reconnects(
    tmp_path: Path, standby: str
) -> None:
    keys, port = _keys(tmp_path), _free_port()
    remote = _remote(keys, port, standby=standby)
    with infer_server(tmp_path, keys, port) as server:
        with daemon_process(tmp_path, "control.rate_hz=100", *remote) as daemon:
            driver = StreamingDriver(f"ipc://{tmp_path}/tempo.sock").start()
            try:
                wait_for(lambda: _actions(driver.records) >= 20, 120)
                relay = _status(tmp_path)["policy"]["process"]["pid"]
                # The robot PC's side: neither the daemon nor its relay has loaded torch.
                assert "libtorch" not in _libraries(daemon.pid)
                assert "libtorch" not in _libraries(relay)
                # The link's round trip and the server's clock (the same host's here: an
                # offset within half the shortest round trip of zero).
                wait_for(lambda: _status(tmp_path)["policy"].get("link"), 30)
                wait_for(lambda: _status(tmp_path)["policy"]["link"]["rtt_ms"] is not None, 30)
                link = _status(tmp_path)["policy"]["link"]
                assert link["address"] == f"tcp://127.0.0.1:{port}"
                assert 0 < link["min_rtt_ms"] <= link["rtt_ms"]
                assert abs(link["clock_offset_ms"]) <= link["min_rtt_ms"] / 2 + 0.001
                shown = render_status(_status(tmp_path))
                assert f"remote inference at tcp://127.0.0.1:{port}: round trip p50 " in shown
                seq_at_fault = driver.client.connection.seq
                os.kill(server.pid, signal.SIGKILL)
                wait_for(
                    lambda: any(r.reason == "inference_restarting" for r in driver.records), 30
                )
                held_at = len(driver.records)
                with infer_server(tmp_path, keys, port):
                    wait_for(lambda: _actions(driver.records[held_at:]) >= 20, 120)
            finally:
                driver.stop()
    records = list(driver.records)
    first_hold = next(i for i, r in enumerate(records) if r.reason == "inference_restarting")
    after = [r for r in records[first_hold:] if r.kind == "action"]
    assert after, "never served again after the server came back"
    # No action planned before the fault reaches the robot after it.
    assert all(r.obs_seq > seq_at_fault for r in after)
    assert all(r.finite for r in records)


def test_a_wrong_server_key_is_refused_in_one_sentence(tmp_path: Path) -> None:
    keys, port = _keys(tmp_path), _free_port()
    with infer_server(tmp_path, keys, port):
        args = [sys.executable, "-m", "controller.cli", "serve"]
        args += [
            "--set", f"server.bind=ipc://{tmp_path}/tempo.sock",
            "--set", f"server.status_bind=ipc://{tmp_path}/status.sock",
        ]  # fmt: skip
        for override in _remote(keys, port, server_key="other_public"):
            args += ["--set", override]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("tempo: ")]
    assert len(said) == 1 and "refused the link" in said[0], done.stderr


def test_a_daemon_sending_garbage_ends_its_own_session_only(tmp_path: Path) -> None:
    from controller.process_protocol.process_messages import Standby, decode
    from controller.wire.curve import load_client_keys

    keys, port = _keys(tmp_path), _free_port()
    client_keys = load_client_keys(keys["robot_secret"], keys["server_public"])
    context = zmq.Context()

    def dealer() -> zmq.Socket:
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        client_keys.apply(socket)
        socket.connect(f"tcp://127.0.0.1:{port}")
        socket.send_multipart([b"open"])
        return socket

    def next_message(socket: zmq.Socket, kinds: tuple[bytes, ...]) -> list[bytes]:
        def taken() -> list[bytes] | None:
            if socket.poll(20):
                parts = socket.recv_multipart()
                return parts if parts[0] in kinds else None
            return None

        return wait_for(taken, 120)

    try:
        with infer_server(tmp_path, keys, port) as server:
            bad = dealer()
            bad.send_multipart([b"msg", b"\xc1 not a message"])
            assert next_message(bad, (b"gone",)) == [b"gone"]
            good = dealer()  # the server still serves others
            parts = next_message(good, (b"msg",))
            assert isinstance(decode(parts[1]), Standby)
            assert server.poll() is None
            bad.close(0)
            good.close(0)
    finally:
        context.term()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_hung_process_on_the_server_is_replaced_and_the_robot_held_meanwhile(
    tmp_path: Path,
) -> None:
    keys, port = _keys(tmp_path), _free_port()
    overrides = ("control.rate_hz=100", "supervision.hang_timeout_s=1.0", *_remote(keys, port))
    with infer_server(tmp_path, keys, port) as server:
        with daemon_process(tmp_path, *overrides):
            driver = StreamingDriver(f"ipc://{tmp_path}/tempo.sock").start()
            try:
                wait_for(lambda: _actions(driver.records) >= 20, 120)
                (hung,) = _children(server.pid)
                seq_at_fault = driver.client.connection.seq
                os.kill(hung, signal.SIGSTOP)
                wait_for(
                    lambda: any(r.reason == "inference_restarting" for r in driver.records), 30
                )
                held_at = len(driver.records)
                wait_for(lambda: _actions(driver.records[held_at:]) >= 20, 120)
            finally:
                driver.stop()
            status = _status(tmp_path)
        assert status["policy"]["process"]["restarts"][0]["cause"] == "hung"
        wait_for(lambda: not Path(f"/proc/{hung}").exists() or _zombie(hung), 30)
    after = [r for r in driver.records[held_at:] if r.kind == "action"]
    assert all(r.obs_seq > seq_at_fault for r in after)


def _zombie(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
