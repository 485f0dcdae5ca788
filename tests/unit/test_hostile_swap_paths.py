"""A swap path is what a client sent: a newline or an ESC in it never reaches the daemon's log
or status raw (`tempo status` shows swap.path and swap.detail; the log says which swap failed)."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest

from controller.errors import PolicyError
from controller.link.policy_swap import Swapper

HOSTILE = "/tmp/ckpt\nINFO forged: every robot stopped\x1b[2J"


class RefusingPolicy:
    """A served policy whose new processes never start: each names the path it was given."""

    serving = True
    stopping = False
    config_json = json.dumps({"policy": {"kind": "reach"}})
    switch_lock = threading.Lock()

    def spawner_for(self, config_json: str) -> Any:
        raise PolicyError(f"no checkpoint at {json.loads(config_json)['policy']['path']}")


def test_a_swap_path_with_a_newline_and_esc_is_escaped_in_the_log_and_the_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    swapper = Swapper(RefusingPolicy())  # type: ignore[arg-type]
    caplog.set_level(logging.INFO)
    try:
        started = swapper.start(HOSTILE, now=True, name="default")
        deadline = time.monotonic() + 10
        while (swapper.status() or {}).get("phase") != "failed":
            assert time.monotonic() < deadline, swapper.status()
            time.sleep(0.01)
        status = swapper.status()
    finally:
        swapper.close()
    assert status is not None
    for shown in (started["path"], status["path"], status["detail"]):
        assert "\n" not in shown and "\x1b" not in shown, shown
    assert "\\n" in status["detail"] and "\\x1b" in status["detail"], status["detail"]
    lines = [record.getMessage() for record in caplog.records]
    assert any("failed" in line for line in lines), lines
    for line in lines:
        assert "\n" not in line and "\x1b" not in line, line
