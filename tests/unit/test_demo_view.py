"""The demo's status line and notes (controller.sim.demo), on made-up status snapshots."""

from __future__ import annotations

from controller.observe.status import json_safe
from controller.sim.demo import _status_line, step_versus_period


def status(step_s: float | None, control_hz: float = 50.0) -> dict:
    return {
        "achieved_hz": 50.0,
        "control_hz": control_hz,
        "missed_ticks": 0,
        "robots": [{}],
        "holds_sent": 7,
        "guard_interventions": {},
        "policy": {"tier": "eager_fp32", "tiers": [{"name": "eager_fp32", "step_s": step_s}]},
    }


def test_a_step_longer_than_the_control_period_is_said() -> None:
    note = step_versus_period(status(0.025))
    assert note is not None and "25 ms" in note and "control period (20 ms" in note
    assert step_versus_period(status(0.010)) is None
    assert step_versus_period(status(0.025, control_hz=20.0)) is None  # 50 ms period
    assert step_versus_period(status(None)) is None


def test_status_line_says_which_clock_each_hold_count_counts() -> None:
    driver = {"holds": 3, "loop_hz": 200.0, "latency_ms_p50": 1.0, "latency_ms_p99": 2.0}
    line = _status_line(status(0.01), driver)
    assert "held: robot loop turns 3 (200 Hz), daemon ticks 7 (50 Hz)" in line


def test_status_line_before_the_first_action_says_it_waits() -> None:
    no_robot = {**status(0.01), "robots": []}
    nan = {"latency_ms_p50": float("nan"), "latency_ms_p99": float("nan")}
    for snapshot, driver in ((status(0.01), {}), (no_robot, {"holds": 0}), (status(0.01), nan)):
        line = _status_line(snapshot, driver)
        assert line == "waiting for the simulated robot's first action | tier eager_fp32"
        assert "nan" not in line


def test_json_safe_turns_nan_into_null() -> None:
    assert json_safe({"a": float("nan"), "b": [1.0, float("nan")], "c": 2}) == {
        "a": None,
        "b": [1.0, None],
        "c": 2,
    }
