"""Two policies in one `tempo serve`, each in its own inference process: killing one policy's
process holds only that policy's robot; the other policy's robot keeps getting actions."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from controller.observe.status_server import request_status
from controller.observe.status_view import render_status
from tests.conftest import StreamingDriver, daemon_process, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals a child process")

TWO = "policies=[{name: left, policy: {kind: reach}}, {name: right, policy: {kind: reach}}]"


def _status(tmp_path: Path) -> dict[str, Any]:
    status = request_status(f"ipc://{tmp_path}/status.sock", 2.0)
    assert status is not None
    return status


def _pid(tmp_path: Path, policy: str) -> int | None:
    return _status(tmp_path)["policies"][policy]["policy"]["process"]["pid"]


def _actions(driver: StreamingDriver) -> int:
    return sum(r.kind == "action" for r in driver.records)


def test_one_policys_process_restarting_holds_only_its_own_robots(tmp_path: Path) -> None:
    overrides = ("control.rate_hz=50", "supervision.standby_process=false", TWO)
    with daemon_process(tmp_path, *overrides):
        endpoint = f"ipc://{tmp_path}/tempo.sock"
        left = StreamingDriver(endpoint, robot="l0", policy="left").start()
        right = StreamingDriver(endpoint, robot="r0", policy="right").start()
        try:
            wait_for(lambda: _actions(left) >= 10 and _actions(right) >= 10, 60)
            first = wait_for(lambda: _pid(tmp_path, "left"))
            assert first != _pid(tmp_path, "right")  # a process each
            os.kill(first, signal.SIGKILL)
            wait_for(lambda: any(r.reason == "inference_restarting" for r in left.records), 30)
            wait_for(lambda: _pid(tmp_path, "left") not in (None, first), 60)
            served = _actions(left)
            wait_for(lambda: _actions(left) >= served + 10, 60)  # then the left one again
        finally:
            left.stop()
            right.stop()
        assert not any(r.reason == "inference_restarting" for r in right.records)
        # While the left policy was down (its first restarting hold until its first action
        # after), the right one's robot kept getting actions.
        held = next(r.received_ns for r in left.records if r.reason == "inference_restarting")
        back = next(
            r.received_ns for r in left.records if r.kind == "action" and r.received_ns > held
        )
        during = [r for r in right.records if r.kind == "action" and held < r.received_ns < back]
        assert len(during) >= 10, f"{len(during)} actions to the other policy's robot meanwhile"
        status = _status(tmp_path)
        assert status["policies"]["left"]["policy"]["process"]["restarts"][0]["cause"] == "exited"
        assert status["policies"]["right"]["policy"]["process"]["restarts"] == []
        text = render_status(status)
        assert "policy left: " in text and "policy right: " in text
