"""What `tempo serve` checks and says before it is ready: guards and teleop naming joints the
policy does not have are refused at start (not at the first hello), and the guards in force are
logged, with a warning when no position limits are configured."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from controller.app import serve
from controller.errors import CheckpointError, ConfigError
from tests.conftest import ipc_config


def serve_until_ready(config) -> None:  # type: ignore[no-untyped-def]
    stop = threading.Event()
    serve(config, stop=stop, on_ready=lambda daemon: stop.set(), install_signals=False)


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ("guards.position_limits={elbow: [-1, 1]}", "guards.position_limits"),
        ("guards.max_velocity={elbow: 1.0}", "guards.max_velocity"),
        ("teleop.joints=[elbow]", "teleop.joints"),
    ],
)
def test_unknown_joints_in_guards_or_teleop_are_refused_at_start(
    tmp_path: Path, override: str, where: str
) -> None:
    with pytest.raises(ConfigError, match=f"{where}.*'elbow'"):
        serve_until_ready(ipc_config(tmp_path, override))


def test_active_guards_are_logged_and_missing_position_limits_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="controller.daemon.service")
    serve_until_ready(ipc_config(tmp_path))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("guards for")]
    assert len(lines) == 1 and "no position limits" in lines[0] and "watchdog" in lines[0]
    assert any("no position limits are configured" in r.getMessage() for r in caplog.records)

    caplog.clear()
    limited = ipc_config(
        tmp_path, "guards.position_limits={joint_0: [-1, 1]}", "guards.max_velocity=2.0"
    )
    serve_until_ready(limited)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("guards for")]
    assert "position limits on 1 of 6 joints (joint_0)" in lines[0]
    assert "velocity limit on 6 joints" in lines[0]
    assert not any("no position limits are configured" in r.getMessage() for r in caplog.records)


def test_a_missing_checkpoint_folder_is_refused_before_any_inference_process_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import controller.app as app

    started: list[object] = []
    monkeypatch.setattr(app, "inference_process", lambda config: started.append(config))
    missing = tmp_path / "no-such-checkpoint"
    config = ipc_config(
        tmp_path,
        "policy.kind=checkpoint",
        f"policy.path={missing}",
        "supervision.inference_process=true",
    )
    with pytest.raises(CheckpointError, match=f"checkpoint directory {missing} does not exist"):
        serve_until_ready(config)
    assert started == []  # refused in the control process, before torch is imported anywhere
