"""`tempo demo` on a machine without CUDA serves settings a CPU keeps up with, says which and
why, and leaves what the user set alone (controller.sim.demo_fit)."""

from __future__ import annotations

from pathlib import Path

from controller.sim.demo_fit import cpu_fit, explicit_keys


def test_without_cuda_act_gets_a_lower_rate_and_a_chunk_every_ten_steps() -> None:
    settings, line = cpu_fit("act", cuda=False)
    assert "control.rate_hz=10" in settings and "execution.query_period=10" in settings
    assert "execution.ensemble=newest" in settings
    assert line is not None and "no CUDA GPU" in line and "control.rate_hz=10" in line


def test_without_cuda_tdmpc2_serves_fast_mode() -> None:
    settings, line = cpu_fit("tdmpc2", cuda=False)
    assert settings == ["policy.tdmpc2.mode=prior"]
    assert line is not None and "fast mode" in line


def test_with_cuda_the_defaults_stay() -> None:
    for policy in ("act", "flow", "tdmpc2", "reach"):
        assert cpu_fit(policy, cuda=True) == ([], None)
    assert cpu_fit("reach", cuda=False) == ([], None)  # the scripted policy keeps up anywhere


def test_what_the_user_set_is_not_touched(tmp_path: Path) -> None:
    settings, line = cpu_fit("act", cuda=False, explicit=["control.rate_hz"])
    assert not any(s.startswith("control.rate_hz") for s in settings)
    assert line is not None and "rate_hz" not in line
    assert cpu_fit("tdmpc2", cuda=False, explicit=["policy.tdmpc2.mode"]) == ([], None)
    config = tmp_path / "robot.yaml"
    config.write_text("control:\n  rate_hz: 30\n")
    keys = explicit_keys(config, ["execution.query_period=5"])
    assert "control.rate_hz" in keys and "execution.query_period" in keys
    assert "runner.step_budget_ms" not in keys


def test_a_family_section_set_by_the_user_is_not_touched(tmp_path: Path) -> None:
    """policy.tdmpc2.mode set in the file, or with --set in its old spelling policy.planner,
    keeps the demo's fast mode off it (both spellings at once would be refused)."""
    config = tmp_path / "robot.yaml"
    config.write_text("policy:\n  tdmpc2:\n    mode: plan\n")
    assert "policy.tdmpc2.mode" in explicit_keys(config, [])
    assert "policy.tdmpc2.mode" in explicit_keys(None, ["policy.planner.mode=plan"])
    assert "policy.tdmpc2.compute" not in explicit_keys(config, [])
