"""The control side of the inference process, without starting one."""

from __future__ import annotations

from typing import Any

import numpy as np

from controller.link.remote_policy import RemotePolicy
from controller.link.serving_process import HANG_STEPS
from controller.process_protocol.process_messages import ChunkReply


def _reply_with(status: dict[str, object]) -> ChunkReply:
    """A chunk as the inference process sends it now and then, with the runner's status."""
    return ChunkReply(1, np.zeros((2, 3), np.float32), None, 1000, 0, status)


def test_a_slow_policy_is_not_taken_for_a_hung_one() -> None:
    policy = RemotePolicy(["true"], hang_timeout_s=5.0)
    try:
        assert policy.hang_timeout() == 5.0  # nothing measured yet
        policy.serving_process.note_reply(
            _reply_with(
                {
                    "tiers": [
                        {"name": "compiled", "state": "ready", "step_s": 0.1},
                        {"name": "eager_fp32", "state": "ready", "step_s": 0.6},
                        {"name": "graph", "state": "skipped", "step_s": None},
                    ]
                }
            )
        )
        assert policy.hang_timeout() == HANG_STEPS * 0.6  # 12 s: the slowest ready tier rules
        assert policy.last_step_ns == 1000
        policy.serving_process.note_reply(
            _reply_with({"tiers": [{"name": "graph", "state": "ready", "step_s": 0.002}]})
        )
        assert policy.hang_timeout() == 5.0  # a fast policy keeps the configured bound
    finally:
        policy.stop()
        policy.stop()  # twice is fine


def test_a_fatal_reply_ends_serving_with_its_cause_recorded() -> None:
    """The status callback of the request channel: a `fatal` reply fails the process at once
    (the supervisor restarts it), before anyone turns the reply into a prediction."""
    import pytest

    from controller.link.request_channel import InferenceUnavailable, prediction_of
    from controller.process_protocol.process_messages import RequestFailed

    policy = RemotePolicy(["true"], standby=False)
    try:
        fatal = RequestFailed(1, "fatal", "CUDA error: an illegal memory access")
        policy.serving_process.note_reply(fatal)
        assert policy.serving_process.failed and not policy.serving
        assert [(r.cause, r.detail) for r in policy.restarts] == [
            ("fatal", "CUDA error: an illegal memory access")
        ]
        with pytest.raises(InferenceUnavailable, match="illegal memory access"):
            prediction_of(fatal)
    finally:
        policy.stop()


def test_stop_asks_the_spare_first_and_gives_it_a_short_grace(monkeypatch) -> None:
    """At shutdown the spare is asked to stop before the serving process, so both exit at once,
    and a spare that has not exited (still importing) is killed after STANDBY_GRACE_S: it holds
    nothing. Measured on a loaded 2-core machine: SIGTERM -> exit 1.5 s before, 0.9 s after."""
    import subprocess
    import sys

    import controller.link.remote_policy as remote
    import controller.link.serving_process as serving_process
    import controller.link.standbys as standbys
    from controller.link.standbys import STANDBY_GRACE_S

    events: list[str] = []
    names: dict[int, str] = {}

    class Channel:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            pass

    def close_channel(channel: Any, ask_to_stop: bool) -> None:
        name = getattr(channel, "name", "spare")  # the spare's channel is a real one
        events.append(f"stop {name}")
        channel.close()

    def wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> None:
        events.append(f"wait {names[process.pid]} {timeout_s}")
        process.kill()
        process.wait()

    monkeypatch.setattr(remote, "wait_or_kill", wait_or_kill)
    monkeypatch.setattr(serving_process, "wait_or_kill", wait_or_kill)
    monkeypatch.setattr(serving_process, "close_channel", close_channel)
    monkeypatch.setattr(standbys, "close_channel", close_channel)
    sleeper = [sys.executable, "-c", "import time; time.sleep(31)"]  # the spare: never ready
    policy = RemotePolicy(sleeper, standby="spare")
    serving = subprocess.Popen(["sleep", "30"])
    names[serving.pid] = "serving"
    policy.serving_process.bind((Channel("serving"), serving))  # type: ignore[arg-type]
    policy.standbys.refill()  # the spare, spawned as a restart would find it
    spare = policy.standby_pid
    assert spare is not None
    names[spare] = "spare"
    policy.stop()
    assert events == [
        "stop spare",
        "stop serving",
        "wait serving 2.0",
        f"wait spare {STANDBY_GRACE_S}",
    ]
    assert STANDBY_GRACE_S <= 0.2
