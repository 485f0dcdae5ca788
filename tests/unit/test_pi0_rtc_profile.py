"""`tempo profile` and `tempo profile compare --rtc` on a tiny pi0 demo directory (CPU): the
profile's phases are pi0's (vision, prefix, each denoising step, guidance and autograd with RTC
on), and the comparison gives a verdict per mode."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from controller.config import load_config
from policies.pi0.demo import demo_settings


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is the faster here


def settings(tmp_path: Path) -> list[str]:
    return [
        "policy.kind=checkpoint",
        *demo_settings(tmp_path, "pi0"),
        "execution.ensemble=newest",
        "execution.query_period=4",
        "runner.top_tier=eager_fp32",
        "runner.cache_dir=null",
        "runner.step_budget_ms=null",
    ]


def test_profile_breaks_pi0_into_its_phases_and_compare_gives_a_verdict_per_mode(
    tmp_path: Path,
) -> None:
    from controller.tools.profiling import run_profile
    from controller.tools.rtc_compare import render_rtc_compare, run_rtc_compare

    base = settings(tmp_path)
    result = run_profile(load_config(None, [*base, "policy.rtc.mode=exact"]), 2, warmup=1)
    keys = {row.key for row in result.rows}
    steps = {f"phase:step{k}" for k in range(3)}  # the demo's 3 Euler steps
    assert {"phase:total", "phase:vision", "phase:prefix", *steps} <= keys
    assert {"phase:guidance", "phase:autograd"} <= keys
    assert result.flow == {"rtc_mode": "exact", "chunk_size": 20, "n_steps": 3}
    plain = run_profile(load_config(None, base), 2, warmup=1)
    plain_keys = {row.key for row in plain.rows}
    assert {"phase:vision", "phase:prefix", *steps} <= plain_keys
    assert "phase:guidance" not in plain_keys

    compared = run_rtc_compare(load_config(None, base), iterations=2, warmup=0)
    assert [m.mode for m in compared.modes] == ["off", "exact", "stop_grad", "inpaint"]
    text = render_rtc_compare(compared)
    for mode in ("exact", "stop_grad", "inpaint"):
        assert f"verdict rtc {mode}: " in text


def test_compare_adds_trained_for_a_pi05_trained_for_it() -> None:
    from controller.tools.rtc_compare import RTC_MODES, default_modes
    from policies.pi0.pi05_config import tiny_pi05_config
    from policies.pi0.step import Pi0Step, Pi0StepConfig

    def step(delay: int) -> Pi0Step:
        network = tiny_pi05_config(rtc_training_max_delay=delay)
        config = Pi0StepConfig(network=network, state_size=2, action_size=2, camera_sizes=((8, 8),))
        with torch.device("meta"):
            return Pi0Step(config)

    assert default_modes(step(3)) == (*RTC_MODES, "trained")
    assert default_modes(step(0)) == RTC_MODES


def test_compare_runs_at_the_checkpoints_own_query_period(tmp_path: Path) -> None:
    """No execution.query_period in the config: the checkpoint's n_action_steps sets it, and
    each round covers a whole period, so every mode's policy step is measured (it had windows
    of the raw default, 1 step, and measured none: an IndexError on an H100)."""
    from controller.tools.rtc_compare import run_rtc_compare

    base = [s for s in settings(tmp_path) if not s.startswith("execution.query_period")]
    config = load_config(None, base)
    compared = run_rtc_compare(config, iterations=2, warmup=0, modes=("stop_grad",))
    assert compared.query_period > 1
    assert all(m.predict.size >= 2 for m in compared.modes)
