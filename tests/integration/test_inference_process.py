"""The policy in its own supervised process: the faults the control process must survive.

Each test serves the built-in reach policy on the CPU through a real inference process and
asserts what a good driver saw: `hold` (reason inference_restarting) while the process is
down, never an action planned by the process that died, then a finite stream again.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from controller.errors import PolicyError
from controller.link.remote_policy import RemotePolicy
from controller.observe.status_server import request_status
from controller.observe.status_view import render_status
from policies.base import first_context
from tests.conftest import (
    StreamingDriver,
    daemon_process,
    ipc_config,
    recording_client,
    running_daemon,
    wait_for,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

FLAKY = Path(__file__).with_name("flaky_inference.py")


def _status(tmp_path: Path) -> dict:
    status = request_status(f"ipc://{tmp_path}/status.sock", 2.0)
    assert status is not None
    return status


def _child_pid(tmp_path: Path) -> int | None:
    """The inference process's pid; None between a death and the restart."""
    return _status(tmp_path)["policy"]["process"]["pid"]


def _loaded_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def _actions_after(driver: StreamingDriver, count: int, timeout: float = 60.0) -> None:
    seen = sum(r.kind == "action" for r in driver.records)
    wait_for(lambda: sum(r.kind == "action" for r in driver.records) >= seen + count, timeout)


def _check_outage(driver: StreamingDriver, seq_at_fault: int) -> None:
    records = list(driver.records)
    restarting = [i for i, r in enumerate(records) if r.reason == "inference_restarting"]
    assert restarting, "no hold with reason inference_restarting reached the driver"
    after = records[restarting[0] :]
    actions_after = [r for r in after if r.kind == "action"]
    assert actions_after, "serving never resumed"
    # Never an action planned by the process that died: only chunks of observations sent
    # after the fault.
    assert all(r.obs_seq > seq_at_fault for r in actions_after), [
        (r.step, r.obs_seq) for r in actions_after if r.obs_seq <= seq_at_fault
    ]
    assert all(r.finite for r in records)
    steps = [r.step for r in records if r.session == records[-1].session]
    assert steps == sorted(set(steps)), "a step was sent twice or out of order"


def test_control_process_never_loads_torch(tmp_path: Path) -> None:
    with daemon_process(tmp_path) as daemon:
        child = wait_for(lambda: _child_pid(tmp_path))
        assert "libtorch" not in _loaded_libraries(daemon.pid)
        assert "libtorch" in _loaded_libraries(child)


@pytest.mark.parametrize("fault", ["sigkill", "hang"])
def test_driver_is_held_then_served_fresh_after_the_inference_process_dies(
    tmp_path: Path, fault: str
) -> None:
    overrides = ("control.rate_hz=100", "supervision.hang_timeout_s=1.0")
    with daemon_process(tmp_path, *overrides):
        driver = StreamingDriver(f"ipc://{tmp_path}/tempo.sock").start()
        try:
            _actions_after(driver, 20)
            child = wait_for(lambda: _child_pid(tmp_path))
            seq_at_fault = driver.client.connection.seq
            os.kill(child, signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)
            wait_for(lambda: any(r.reason == "inference_restarting" for r in driver.records), 30)
            wait_for(lambda: _child_pid(tmp_path) not in (None, child), 60)
            _actions_after(driver, 20)
        finally:
            driver.stop()
        _check_outage(driver, seq_at_fault)
        status = _status(tmp_path)
        cause = "exited" if fault == "sigkill" else "hung"
        assert status["policy"]["process"]["restarts"][0]["cause"] == cause
        assert f"{cause}: " in render_status(status)  # `tempo status` shows the cause
        assert not Path(f"/proc/{child}").exists()  # the hung one was killed, not left behind


def _remote(tmp_path: Path, marker: Path, *overrides: str) -> RemotePolicy:
    config_file = tmp_path / "config.json"
    config = ipc_config(tmp_path, *overrides)
    config_file.write_text(json.dumps(config.model_dump(mode="json")))
    command = [sys.executable, str(FLAKY), str(marker), "inference-process"]
    return RemotePolicy([*command, "--config-json", str(config_file)], hang_timeout_s=1.0)


def test_a_process_that_dies_during_its_startup_checks_fails_the_start(tmp_path: Path) -> None:
    marker = tmp_path / "die-once"
    marker.touch()
    policy = _remote(tmp_path, marker)
    with pytest.raises(PolicyError, match="exited with code 5 while starting"):
        policy.start()
    assert not policy.serving


def test_a_restart_that_dies_during_its_startup_checks_is_retried(tmp_path: Path) -> None:
    marker = tmp_path / "die-once"
    policy = _remote(tmp_path, marker)
    policy.start()
    try:
        first = policy.pid
        assert first is not None and policy.serving
        marker.touch()  # the next start dies in its parity check
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not policy.serving, 10)
        wait_for(lambda: policy.serving, 60)
        causes = [r.cause for r in policy.restarts]
        assert causes[:2] == ["exited", "restart_failed"], causes
        assert policy.pid not in (None, first)
        images = {"front": np.zeros((96, 128, 3), np.uint8)}
        prediction = policy.predict(images, first_context(policy.spec, np.zeros(6, np.float32)))
        assert prediction.actions.shape == (policy.spec.chunk_size, 6)
        assert np.isfinite(prediction.actions).all()
        # The step as the inference process timed it, and the trips on the clock both share.
        assert policy.last_step_ns is not None and policy.last_step_ns > 0
        assert policy.last_trips_ns is not None and min(policy.last_trips_ns) >= 0
    finally:
        policy.stop()
    assert policy.pid is None  # stop() waited for the process


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _cpu_used_over(pid: int, seconds: float) -> float:
    before = _cpu_seconds(pid)
    time.sleep(seconds)
    return _cpu_seconds(pid) - before


@pytest.mark.parametrize("busy_poll_ms", [0, 1500])
def test_busy_polling_keeps_the_process_awake_after_a_step_and_no_longer(
    tmp_path: Path, busy_poll_ms: int
) -> None:
    policy = _remote(tmp_path, tmp_path / "no-marker", f"supervision.busy_poll_ms={busy_poll_ms}")
    policy.start()
    try:
        pid = policy.pid
        assert pid is not None
        images = {"front": np.zeros((96, 128, 3), np.uint8)}
        context = first_context(policy.spec, np.zeros(6, np.float32))
        time.sleep(2.0)  # start-up's own work is over; the process waits for a request
        assert _cpu_used_over(pid, 0.5) < 0.2  # asleep before any step
        prediction = policy.predict(images, context)
        assert np.isfinite(prediction.actions).all()
        awake = _cpu_used_over(pid, 0.5)  # within the busy window after the step
        if busy_poll_ms:
            assert awake > 0.1, awake  # polling (even a loaded 2-core machine gives it that)
            time.sleep(1.2)  # the window ends
        assert _cpu_used_over(pid, 0.5) < 0.2  # asleep again
        assert np.isfinite(policy.predict(images, context).actions).all()  # and still serving
    finally:
        policy.stop()


def test_a_restart_builds_in_the_standby_process_and_stop_ends_both(tmp_path: Path) -> None:
    policy = _remote(tmp_path, tmp_path / "no-marker")
    policy.start()
    try:
        first, spare = policy.pid, policy.standby_pid
        assert spare is not None and spare != first
        assert policy.status()["process"]["standby_pid"] == spare
        wait_for(lambda: policy.status()["process"]["standby_ready"], 300)  # imported, read ahead
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not policy.serving, 10)
        wait_for(lambda: policy.serving, 60)
        assert policy.pid == spare  # the spare took over: no fresh interpreter was started
        next_spare = wait_for(lambda: policy.standby_pid, 10)
        assert next_spare not in (first, spare)
    finally:
        policy.stop()
    assert policy.pid is None and policy.standby_pid is None
    wait_for(lambda: not Path(f"/proc/{next_spare}").exists() or _zombie(next_spare), 10)


def test_the_inference_process_ends_when_the_control_process_dies(tmp_path: Path) -> None:
    """The serving process and the standby alike; killed while the standby is still
    importing (it asks to die with its parent only once it runs, and must notice that the
    parent is already gone)."""
    with daemon_process(tmp_path) as daemon:
        child = wait_for(lambda: _child_pid(tmp_path))
        wait_for(lambda: _status(tmp_path)["policy"]["process"]["standby_pid"], 10)
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(5)
        wait_for(lambda: not Path(f"/proc/{child}").exists() or _zombie(child), 10)
        wait_for(lambda: not _children_of(daemon.pid), 60)


def _children_of(control_pid: int) -> list[int]:
    """Live processes started by that control process (they carry its pid in their env)."""
    found = []
    marker = f"TEMPO_CONTROL_PID={control_pid}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0") and not _zombie(
                int(proc.name)
            ):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_an_input_fault_in_the_inference_process_is_refused_to_its_robot_only(
    tmp_path: Path,
) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=100")
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config.model_dump(mode="json")))
    script = str(Path(__file__).with_name("nan_inference.py"))
    policy = RemotePolicy(
        [sys.executable, script, "inference-process", "--config-json", str(config_file)]
    )
    policy.start()
    try:
        with running_daemon(config, policy) as daemon:
            good = StreamingDriver(config.server.bind).start()
            bad = recording_client(config.server.bind, "bad")
            try:
                _actions_after(good, 10)
                bad.connect()
                image = {"front": np.zeros((96, 128, 3), np.uint8)}
                poisoned = np.array([5000.0, 0, 0, 0, 0, 0], np.float32)
                for _ in range(10):
                    bad.send_observation(image, poisoned)
                    bad.receive(timeout_s=0.02)
                wait_for(
                    lambda: (bad.receive(0.01), bad.counters.error_codes)[1].get("unusable_input")
                )
                assert not any(r.kind == "action" for r in bad.records)
                _actions_after(good, 10)  # the good robot is served on
            finally:
                bad.close()
                good.stop()
            assert daemon.lanes.default.feed.input_faults >= 1
            assert policy.serving and policy.restart_count == 0
            assert policy.status()["demotions"] == []
    finally:
        policy.stop()
