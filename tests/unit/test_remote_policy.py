"""The control side of the inference process, without starting one."""

from __future__ import annotations

from controller.link.remote_policy import RemotePolicy
from controller.link.supervision import HANG_STEPS


def test_a_slow_policy_is_not_taken_for_a_hung_one() -> None:
    policy = RemotePolicy(["true"], hang_timeout_s=5.0)
    try:
        assert policy.hang_timeout() == 5.0  # nothing measured yet
        policy._status = {
            "tiers": [
                {"name": "compiled", "state": "ready", "step_s": 0.1},
                {"name": "eager_fp32", "state": "ready", "step_s": 0.6},
                {"name": "graph", "state": "skipped", "step_s": None},
            ]
        }
        assert policy.hang_timeout() == HANG_STEPS * 0.6  # 12 s: the slowest ready tier rules
        policy._status = {"tiers": [{"name": "graph", "state": "ready", "step_s": 0.002}]}
        assert policy.hang_timeout() == 5.0  # a fast policy keeps the configured bound
    finally:
        policy.stop()
        policy.stop()  # twice is fine


def test_stop_asks_the_spare_first_and_gives_it_a_short_grace(monkeypatch) -> None:
    """At shutdown the spare is asked to stop before the serving process, so both exit at once,
    and a spare that has not exited (still importing) is killed after STANDBY_GRACE_S: it holds
    nothing. Measured on a loaded 2-core machine: SIGTERM -> exit 1.5 s before, 0.9 s after."""
    import subprocess

    import controller.link.remote_policy as remote
    import controller.link.supervision as supervision
    from controller.link.standbys import STANDBY_GRACE_S

    events: list[str] = []

    class Channel:
        def __init__(self, name: str) -> None:
            self.name = name

        def send(self, data: bytes) -> None:
            events.append(f"stop {self.name}")

        def close(self) -> None:
            pass

    def wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> None:
        events.append(f"wait {process.args[1]} {timeout_s}")
        process.kill()
        process.wait()

    monkeypatch.setattr(remote, "wait_or_kill", wait_or_kill)
    monkeypatch.setattr(supervision, "wait_or_kill", wait_or_kill)
    policy = RemotePolicy(["true"])
    serving = subprocess.Popen(["sleep", "30"])
    spare = subprocess.Popen(["sleep", "31"])
    policy._link, policy._process = Channel("serving"), serving  # type: ignore[assignment]
    policy._standbys._spare = (Channel("spare"), spare)  # type: ignore[assignment]
    policy.stop()
    assert events == [
        "stop spare",
        "stop serving",
        "wait 30 2.0",
        f"wait 31 {STANDBY_GRACE_S}",
    ]
    assert STANDBY_GRACE_S <= 0.2
