"""The control side of the inference process, without starting one."""

from __future__ import annotations

from controller.link.remote_policy import HANG_STEPS, RemotePolicy


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
