"""A hot standby (`supervision.standby: hot`): a second inference process, built and waiting,
takes over when the serving one dies or hangs, without building anything; a new one follows.

The built-in reach policy on the CPU, through real inference processes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.link.remote_policy import RemotePolicy
from controller.observe.status_server import request_status
from controller.observe.status_view import render_status
from policies.base import first_context
from tests.conftest import StreamingDriver, daemon_process, ipc_config, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

FLAKY = Path(__file__).with_name("flaky_inference.py")


def _hot(tmp_path: Path, marker: Path) -> RemotePolicy:
    """A RemotePolicy with a hot standby; a start dies in its parity check while `marker`
    exists (so a build after a fault can be made to fail: a take-over must not build)."""
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(ipc_config(tmp_path).model_dump(mode="json")))
    command = [sys.executable, str(FLAKY), str(marker), "inference-process"]
    command += ["--config-json", str(config_file)]
    return RemotePolicy(command, hang_timeout_s=1.0, standby="hot")


def _act(policy: RemotePolicy) -> np.ndarray:
    images = {"front": np.zeros((96, 128, 3), np.uint8)}
    context = first_context(policy.spec, np.zeros(6, np.float32))
    return policy.predict(images, context).actions


@pytest.mark.parametrize("fault", ["sigkill", "hang"])
def test_the_hot_standby_takes_over_without_a_build_and_another_is_built(
    tmp_path: Path, fault: str
) -> None:
    marker = tmp_path / "die-once"
    policy = _hot(tmp_path, marker)
    policy.start()
    try:
        first = policy.pid
        hot = wait_for(lambda: policy.status()["process"]["standby_ready"] and policy.standby_pid,
                       60)  # fmt: skip
        assert hot not in (None, first)
        process = policy.status()["process"]
        assert process["standby"] == "hot"
        # What it costs is stated: its own report once built, and its resident memory now.
        assert process["standby_memory"]["host_resident_bytes"] > 0
        assert "gpu_reserved_bytes" in process["standby_memory"]  # None on the CPU
        assert process["memory"]["host_resident_bytes"] > 0
        marker.touch()  # any build from now on dies: the take-over must not build
        os.kill(first or 0, signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)
        wait_for(lambda: policy.serving and policy.pid == hot, 30)
        assert marker.exists(), "a process was built after the fault"
        causes = [r.cause for r in policy.restarts]
        assert causes == ["exited" if fault == "sigkill" else "hung", "standby_took_over"]
        assert str(hot) in policy.restarts[-1].detail
        assert np.isfinite(_act(policy)).all()  # served by the standby, from a new observation
        assert not Path(f"/proc/{first}").exists() or _zombie(first or 0)  # the old one is gone
        marker.unlink()
        # The next hot standby is built in the background, and is a new process.
        again = wait_for(
            lambda: policy.status()["process"]["standby_ready"] and policy.standby_pid, 60
        )
        assert again not in (first, hot)
    finally:
        policy.stop()
    assert policy.pid is None and policy.standby_pid is None


def test_a_fault_while_the_hot_standby_builds_waits_for_it_instead_of_a_second_build(
    tmp_path: Path,
) -> None:
    policy = _hot(tmp_path, tmp_path / "no-marker")
    policy.start()
    try:
        first, building = policy.pid, policy.standby_pid
        assert building is not None and not policy.status()["process"]["standby_ready"]
        os.kill(first or 0, signal.SIGKILL)  # seconds before the standby is built
        wait_for(lambda: policy.serving and policy.pid not in (None, first), 60)
        assert policy.pid == building  # the standby, not a fresh process
        assert [r.cause for r in policy.restarts] == ["exited", "standby_took_over"]
        assert np.isfinite(_act(policy)).all()
    finally:
        policy.stop()


def test_a_hot_standby_that_dies_is_built_again_and_serving_goes_on(tmp_path: Path) -> None:
    import controller.link.standbys as standbys

    policy = _hot(tmp_path, tmp_path / "no-marker")
    policy.start()
    old_after = standbys.REBUILD_AFTER_S
    standbys.REBUILD_AFTER_S = 0.1
    try:
        hot = wait_for(lambda: policy.status()["process"]["standby_ready"] and policy.standby_pid,
                       60)  # fmt: skip
        os.kill(hot, signal.SIGKILL)
        again = wait_for(lambda: policy.standby_pid not in (None, hot) and policy.standby_pid, 30)
        wait_for(lambda: policy.status()["process"]["standby_ready"], 60)
        assert policy.standby_pid == again
        assert "exited with code -9" in policy.status()["process"]["standby_failure"]
        assert policy.serving and policy.restarts == type(policy.restarts)()  # no restart
        assert np.isfinite(_act(policy)).all()
    finally:
        standbys.REBUILD_AFTER_S = old_after
        policy.stop()


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_a_robot_gets_no_action_from_before_the_fault_when_the_standby_takes_over(
    tmp_path: Path,
) -> None:
    overrides = ("control.rate_hz=100", "supervision.standby=hot")
    status_at = f"ipc://{tmp_path}/status.sock"

    def process() -> dict:
        status = request_status(status_at, 2.0)
        assert status is not None
        return status["policy"]["process"]

    with daemon_process(tmp_path, *overrides):
        driver = StreamingDriver(f"ipc://{tmp_path}/tempo.sock").start()
        try:
            hot = wait_for(lambda: process()["standby_ready"] and process()["standby_pid"], 60)
            wait_for(lambda: sum(r.kind == "action" for r in driver.records) >= 20, 30)
            shown = render_status(request_status(status_at, 2.0) or {})
            assert f"hot standby {hot}: ready; host memory" in shown  # its cost, stated
            first = process()["pid"]
            seq_at_fault = driver.client.connection.seq
            os.kill(first, signal.SIGKILL)
            wait_for(lambda: process()["pid"] == hot, 30)
            seen = len(driver.records)
            wait_for(lambda: sum(r.kind == "action" for r in driver.records[seen:]) >= 20, 30)
            status = request_status(status_at, 2.0)
        finally:
            driver.stop()
    records = list(driver.records)
    assert all(r.finite for r in records)
    # From the moment the daemon saw the fault (its first restart hold; until then the chunk in
    # hand plays on), no action may come from an observation sent before the kill.
    held = next(i for i, r in enumerate(records) if r.reason == "inference_restarting")
    late = [r for r in records[held:] if r.kind == "action" and r.obs_seq <= seq_at_fault]
    assert not late, "an action from an observation older than the fault reached the robot"
    assert status is not None
    causes = [r["cause"] for r in status["policy"]["process"]["restarts"]]
    assert causes == ["exited", "standby_took_over"]
    assert "standby_took_over" in render_status(status)


def test_the_control_loop_drops_every_plan_when_another_process_serves(tmp_path: Path) -> None:
    """A take-over (or a swap) can switch processes between two ticks, so that the loop never
    sees the policy down: it is told all the same (serving_watch), and each robot holds once
    with its plan dropped, then is served from new observations. (Requests in flight at the
    switch fail in the remote feed: the channel they went on is no longer the serving one.)"""
    from controller.feed.served_policy import served_here
    from controller.inference.build import build_policy
    from tests.conftest import running_daemon

    config = ipc_config(tmp_path, "control.rate_hz=100")

    class Switching(served_here):
        epoch = 1  # a RemotePolicy counts the processes that have served

    policy = Switching(build_policy(config.policy, config.robot, config.runner))
    with running_daemon(config, policy):
        driver = StreamingDriver(config.server.bind).start()
        try:
            wait_for(lambda: sum(r.kind == "action" for r in driver.records) >= 20, 30)
            assert not any(r.reason == "inference_restarting" for r in driver.records)
            seq_at_switch = driver.client.connection.seq
            start = len(driver.records)
            policy.epoch = 2  # another process serves from now on
            wait_for(
                lambda: any(r.reason == "inference_restarting" for r in driver.records[start:]),
                10,
            )
            wait_for(lambda: any(r.obs_seq > seq_at_switch for r in driver.records[start:]), 10)
        finally:
            driver.stop()
