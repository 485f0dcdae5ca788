"""`tempo swap`: the daemon builds another checkpoint in a new inference process, checks it and
switches every robot to it (--now); a swap that fails its checks changes nothing and says why.

The demo ACT (seed 0) serves first, or the built-in reach policy where the swap is refused
before anything is built; the new checkpoints are the demo ACT's with other weights, made for
the same robot (joint_0..5, one 96x128 camera, chunks of 20), or for another robot.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.cli import main
from controller.link.remote_policy import RemotePolicy
from controller.observe.status_server import request_status
from policies.base import first_context
from policies.demo import make_demo_checkpoint
from tests.conftest import StreamingDriver, daemon_process, ipc_config, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

JOINTS = tuple(f"joint_{i}" for i in range(6))  # the reach policy's (robot.joints' default)
# No spare to compete for the CPU; checkpoints built at their eager tier only (a loaded CPU).
OVERRIDES = ("control.rate_hz=100", "supervision.standby=off", "runner.top_tier=eager_fp32")


def _act(policy: RemotePolicy) -> np.ndarray:
    images = {"front": np.zeros((96, 128, 3), np.uint8)}
    context = first_context(policy.spec, np.zeros(6, np.float32))
    return policy.predict(images, context).actions


def _serving_act(tmp_path: Path) -> tuple[str, ...]:
    """Overrides serving the demo ACT (seed 0); a swap then brings seed 1, the same robot's
    policy with other weights (a swap from the scripted reach policy, which takes any finite
    state, to a checkpoint with a state range is refused)."""
    served = make_demo_checkpoint(tmp_path / "served", joint_names=JOINTS)
    return (*OVERRIDES, "policy.kind=checkpoint", f"policy.path={served}")


def _remote(tmp_path: Path) -> RemotePolicy:
    config = ipc_config(tmp_path, *_serving_act(tmp_path))
    command = [sys.executable, "-m", "controller.cli", "inference-process"]
    config_json = json.dumps(config.model_dump(mode="json"))
    return RemotePolicy(command, config_json=config_json, standby="off")


def _finished(policy: RemotePolicy) -> dict:
    wait_for(lambda: policy.status()["process"]["swap"]["phase"] != "building", 25)
    return policy.status()["process"]["swap"]


def test_a_swap_to_a_policy_for_another_robot_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    other_robot = str(make_demo_checkpoint(tmp_path / "other", joint_names=list("abcdef")))
    policy = _remote(tmp_path)
    policy.start()
    try:
        served = _act(policy)
        old, epoch, config = policy.pid, policy.epoch, policy.config_json
        policy.swap(other_robot, now=True, name="default")  # built and checked, then refused
        refused = _finished(policy)
        assert refused["phase"] == "failed"
        assert "commands joints" in refused["detail"]
        assert "nothing was changed" in refused["detail"]
        assert policy.pid == old and policy.epoch == epoch and policy.config_json == config
        wait_for(lambda: not Path(f"/proc/{refused['pid']}").exists(), 10)  # it was ended
        assert np.allclose(_act(policy), served)
    finally:
        policy.stop()


def test_a_swap_serves_the_new_checkpoint_and_restarts_build_it(tmp_path: Path) -> None:
    checkpoint = str(make_demo_checkpoint(tmp_path / "act", joint_names=JOINTS, seed=1))
    policy = _remote(tmp_path)
    policy.start()
    try:
        before = _act(policy)
        old, epoch = policy.pid, policy.epoch
        assert policy.swap(checkpoint, now=True, name="default")["phase"] == "building"
        done = _finished(policy)
        assert done["phase"] == "done", done["detail"]
        assert policy.pid == done["pid"] != old
        assert policy.epoch == epoch + 1  # the control loop sees the switch (serving_watch)
        wait_for(lambda: not Path(f"/proc/{old}").exists() or _zombie(old or 0), 10)
        act = _act(policy)
        assert act.shape == before.shape and not np.allclose(act, before)  # other weights
        # From now on a restart builds the new checkpoint.
        assert json.loads(policy.config_json or "")["policy"]["path"] == checkpoint
        assert policy.restart_count == 0
    finally:
        policy.stop()
    assert policy.pid is None


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def _swap(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["swap", "--connect", f"ipc://{tmp_path}/status.sock", *args])
    out, err = capsys.readouterr()
    assert len((out + err).strip().splitlines()) == 1, out + err  # one line of outcome
    return code, out + err


def test_swaps_that_fail_their_checks_change_nothing_and_say_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other_robot = tmp_path / "other"  # refused before anything is built
    status_at = f"ipc://{tmp_path}/status.sock"
    with daemon_process(tmp_path, *OVERRIDES):
        driver = StreamingDriver(f"ipc://{tmp_path}/tempo.sock").start()
        try:
            wait_for(lambda: sum(r.kind == "action" for r in driver.records) >= 10, 30)
            status = request_status(status_at, 2.0)
            assert status is not None
            pid = status["policy"]["process"]["pid"]
            code, text = _swap(tmp_path, capsys, "--path", str(other_robot), "--policy", "arm")
            assert code == 2 and "no policy named 'arm' is served here" in text
            code, text = _swap(tmp_path, capsys, "--path", str(other_robot))
            assert (
                code == 2
                and text.startswith("tempo swap: failed:")
                and "nothing was changed" in text
            )
            code, text = _swap(tmp_path, capsys, "--path", str(tmp_path / "missing"), "--now")
            assert (
                code == 2
                and text.startswith("tempo swap: failed:")
                and "nothing was changed" in text
            )
            seen = len(driver.records)
            wait_for(lambda: sum(r.kind == "action" for r in driver.records[seen:]) >= 10, 30)
            status = request_status(status_at, 2.0)
        finally:
            driver.stop()
    assert status is not None
    process = status["policy"]["process"]
    assert process["pid"] == pid and process["serving"] and process["restarts"] == []
    assert not Path(f"/proc/{process['swap']['pid']}").exists()  # the refused one is gone


def test_tempo_swap_now_switches_the_robots_to_the_new_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = make_demo_checkpoint(tmp_path / "act", joint_names=JOINTS, seed=1)
    status_at = f"ipc://{tmp_path}/status.sock"
    with daemon_process(tmp_path, *_serving_act(tmp_path)):
        driver = StreamingDriver(f"ipc://{tmp_path}/tempo.sock").start()
        try:
            wait_for(lambda: sum(r.kind == "action" for r in driver.records) >= 10, 30)
            before = request_status(status_at, 2.0)
            assert before is not None
            old = before["policy"]["process"]["pid"]
            start = len(driver.records)
            code, text = _swap(tmp_path, capsys, "--path", str(checkpoint), "--now")
            assert code == 0 and text.startswith("tempo swap: done"), text
            swapped_at = driver.client.connection.seq
            seen = len(driver.records)
            wait_for(lambda: any(r.obs_seq > swapped_at for r in driver.records[seen:]), 30)
            after = request_status(status_at, 2.0)
            assert after is not None
        finally:
            driver.stop()
    process = after["policy"]["process"]
    assert process["swap"]["phase"] == "done" and process["pid"] == process["swap"]["pid"]
    assert process["pid"] != before["policy"]["process"]["pid"]
    assert process["restarts"] == []
    actions = [r for r in driver.records[seen:] if r.kind == "action"]
    assert all(r.finite for r in actions)
    # At the switch the robot held (its plan and ensembling dropped), as for a restart.
    assert any(r.reason == "inference_restarting" for r in driver.records[start:])
    assert not Path(f"/proc/{old}").exists() or _zombie(old)  # the old process has ended
