"""`tempo profile` and `tempo profile compare` on the CPU, with tiny and busy-waiting policies."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from controller.config import TempoConfig, load_config  # noqa: E402
from controller.errors import ConfigError  # noqa: E402
from controller.tools.compare import (  # noqa: E402
    paired_bootstrap,
    render_compare,
    run_compare,
    verdict,
    window_steps,
)
from controller.tools.profiling import (  # noqa: E402
    ProfileResult,
    Row,
    recommend,
    render_profile,
    run_profile,
)
from controller.tools.replay import load_replay, save_replay  # noqa: E402
from policies.base import PolicySpec  # noqa: E402
from policies.tensor_policy import TensorPolicy  # noqa: E402
from policies.tiny import build_tiny_policy, tiny_spec  # noqa: E402

FAST = ["runner.top_tier=eager_fp32", "runner.step_budget_ms=null", "runner.parity_observations=2"]


def fast_config(*overrides: str) -> TempoConfig:
    return load_config(None, [*FAST, *overrides])


class BusyWait(nn.Module):
    """A policy whose forward costs a known wall time, returning zeros. It sleeps rather than
    spins: on a loaded 2-core machine a spinning thread is preempted across its deadline, a
    sleeping one only wakes a little late, so the known cost stays known."""

    zero: torch.Tensor

    def __init__(self, spec: PolicySpec, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.chunk_size = spec.chunk_size
        self.action_dim = spec.action_dim
        self.register_buffer("zero", torch.zeros(1))

    def forward(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.zero.expand(images.shape[0], self.chunk_size, self.action_dim) * 1.0


def busy(ms: float) -> TensorPolicy:
    spec = tiny_spec(cameras=1, height=8, width=8)
    return TensorPolicy(spec=spec, module=BusyWait(spec, ms / 1e3))


# -- compare ---------------------------------------------------------------------------------------


def test_compare_finds_the_faster_of_two_policies_with_known_costs() -> None:
    result = run_compare(
        fast_config(),
        fast_config(),
        40,
        warmup=3,
        # Costs well above a loaded machine's per-step overhead (a few ms at load 10), so the
        # ratio stays near 6 whatever else runs: 3 ms against 1 ms measured 1.9x there.
        policies=(busy(30.0), busy(5.0)),
        names=("slow", "fast"),
    )
    assert result.faster == "B"
    assert result.verdict.startswith("B (fast) is faster by")
    assert 2.0 < result.ratio_median < 7.0  # 30 ms + overhead over 5 ms + overhead
    assert result.ci_median[0] > 1.5
    text = render_compare(result)
    assert "verdict: B (fast) is faster by" in text and "ratio of medians" in text
    assert result.a.predict.size == result.b.predict.size == 40


def test_compare_of_identical_policies_finds_no_significant_difference() -> None:
    result = run_compare(
        fast_config(),
        fast_config(),
        60,
        warmup=3,
        policies=(busy(2.0), busy(2.0)),
        min_effect=0.05,  # a shared CI machine: demand a 5% effect before calling one
    )
    assert result.faster is None
    assert result.verdict.startswith("no significant difference")
    assert 0.95 < result.ratio_median < 1.05


def test_query_period_counts_in_the_cost_per_control_step() -> None:
    result = run_compare(
        fast_config(),
        fast_config("execution.query_period=10"),
        12,
        warmup=1,
        policies=(busy(1.0), busy(1.0)),
    )
    assert result.window == 10
    assert result.a.predict.size == 120 and result.b.predict.size == 12
    assert result.faster == "B" and result.ratio_median > 4


def test_bootstrap_and_verdict_on_synthetic_samples() -> None:
    rng = np.random.default_rng(0)
    base = rng.lognormal(0, 0.1, 400)
    ratio, (low, high) = paired_bootstrap(base * 2.0, base)
    assert ratio == pytest.approx(2.0) and low == pytest.approx(2.0) and high == pytest.approx(2.0)
    noise_a, noise_b = base * rng.normal(1, 0.05, 400), base * rng.normal(1, 0.05, 400)
    ratio, ci = paired_bootstrap(noise_a, noise_b)
    assert ci[0] < ratio < ci[1]
    assert verdict(3.1, (2.9, 3.3), 0.02, 0.95)[0].startswith("B is faster by 3.1x")
    assert verdict(0.5, (0.45, 0.55), 0.02, 0.95) == (
        "B is slower by 2.0x (95% CI 1.818x-2.222x, ratio of medians B/A)",
        "A",
    )
    text, faster = verdict(1.01, (1.005, 1.015), 0.02, 0.95)
    assert faster is None and "below the 2% threshold" in text
    text, faster = verdict(1.0, (0.97, 1.04), 0.02, 0.95)
    assert faster is None and "includes 1" in text


def test_window_is_the_lcm_of_the_query_periods_within_reason() -> None:
    assert window_steps(1, 1) == 1
    assert window_steps(1, 10) == 10
    assert window_steps(4, 6) == 12
    assert window_steps(7, 97) == 97  # lcm 679 is too long a sample


# -- profile ---------------------------------------------------------------------------------------


def test_profile_smoke_on_the_tiny_policy(tmp_path: Path) -> None:
    result = run_profile(
        fast_config(),
        8,
        warmup=2,
        policy=build_tiny_policy(),
        torch_profiler_dir=tmp_path / "trace",
        report_dir=tmp_path / "report",
        torch_profiler_steps=2,
    )
    keys = [row.key for row in result.rows]
    for key in ("step", "upload", "model", "download", "rest", "forward", "outside"):
        assert key in keys
    assert {"sub:backbone", "sub:head"} <= set(keys)
    assert keys[-2:] == ["ensembler", "guards"]
    for row in result.rows:
        assert row.samples.size == 8
        if not row.derived and row.key != "outside":
            assert (row.samples > 0).all(), row.key
    assert result.share("step") == pytest.approx(1.0)
    children = sum(result.share(k) or 0 for k in keys if k.startswith("sub:") or k == "outside")
    assert children == pytest.approx(1.0)  # submodules + outside make up the forward
    text = render_profile(result)
    assert "backbone" in text and "forward hooks, wall clock" in text
    assert "derived: step - phases" in text and "recommendations" in text
    assert "Serving from the eager tier eager_fp32" in text  # why nothing is compiled
    data = json.loads((tmp_path / "report" / "profile.json").read_text())
    assert data["tier"] == "eager_fp32" and len(data["rows"]) == len(result.rows)
    assert result.report is not None
    if not any(f.suffix == ".png" for f in result.report.files):  # matplotlib is optional
        assert "pip install 'tempo-controller[plot]'" in result.report.note
    assert result.torch_trace and Path(result.torch_trace).exists()
    assert (tmp_path / "trace" / "summary.txt").exists()


def test_profile_builds_what_serve_builds_the_prior_fallback_included() -> None:
    from controller.tools.profiling import profiled_runner
    from policies.tdmpc2.config import TDMPC2Config
    from policies.tdmpc2.serving import random_tdmpc2_policy

    config = fast_config("policy.tdmpc2.fallback_budget_ms=5")
    model = random_tdmpc2_policy(TDMPC2Config(obs_dim=4, action_dim=2, model_size=1))
    built: list[str] = []
    runner, description = profiled_runner(config, model, built.append)
    assert runner.module is model.module  # the planner is profiled ...
    assert sum(m.startswith("policy started in") for m in built) == 2  # ... its prior built too
    assert "a policy-prior fallback is built beside it, not profiled" in description


def test_profile_leaves_a_compiled_tier_serving(tmp_path: Path) -> None:
    """The submodule hooks go on the module the compiled tier traced; they must come off
    again, or the next compiled call would recompile (an error while serving)."""
    config = fast_config(
        "runner.top_tier=compiled",
        "runner.serve_slower_tiers=true",
        "runner.compile_backend=eager",
        "runner.cache_dir=null",
    )
    result = run_profile(config, 4, warmup=1, policy=build_tiny_policy())
    assert result.tier == "compiled" and result.demotions == []
    assert "read shares, not absolute times" in render_profile(result)


def test_profile_replays_observations_from_a_file(tmp_path: Path) -> None:
    spec = build_tiny_policy().spec
    steps = 5
    rng = np.random.default_rng(0)
    frames = {
        c.name: rng.integers(0, 256, (steps, c.height, c.width, 3), dtype=np.uint8)
        for c in spec.cameras
    }
    path = save_replay(tmp_path / "episode", frames, rng.normal(size=(steps, spec.state_size)))
    assert path.name == "episode.npz"
    result = run_profile(fast_config(), 4, replay=path, warmup=1, policy=build_tiny_policy())
    assert result.source == f"replay: {path}"


def test_replay_files_are_checked_against_the_spec(tmp_path: Path) -> None:
    spec = tiny_spec(cameras=1, height=4, width=6, state_size=3, state_history=2)
    good = np.zeros((3, 4, 6, 3), np.uint8)
    state = np.arange(9, dtype=np.float64).reshape(3, 3)
    observations = load_replay(save_replay(tmp_path / "ok.npz", {"cam0": good}, state), spec)
    assert len(observations) == 3
    first_images, first_state = observations[0]
    assert first_images["cam0"].shape == (4, 6, 3)
    np.testing.assert_array_equal(first_state, [state[0], state[0]])  # history padded
    np.testing.assert_array_equal(observations[2][1], [state[1], state[2]])
    cases = {
        "missing": ({"other": good}, state, "missing ['cam0']"),
        "dtype": ({"cam0": good.astype(np.float32)}, state, "must be uint8"),
        "length": ({"cam0": good[:2]}, state, "same, non-zero time axis"),
        "state": ({"cam0": good}, state[:, :2], "'state' must have shape"),
    }
    for name, (images, values, message) in cases.items():
        path = save_replay(tmp_path / f"{name}.npz", images, values)
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            load_replay(path, spec)


def _result(**overrides: object) -> ProfileResult:
    base = {
        "policy": "test",
        "device": "cuda:0 (H200)",
        "tier": "graph",
        "precision": "fp16",
        "channels_last": False,
        "top_tier_setting": "auto",
        "step_budget_ms": 20.0,
        "iterations": 4,
        "warmup": 0,
        "source": "synthetic",
        "control_hz": 50.0,
        "query_period": 1,
        "n_cameras": 3,
        "frame_bytes": 2_764_800,
    }
    base.update(overrides)
    return ProfileResult(**base)  # type: ignore[arg-type]


def _rows(step: float, upload: float, backbone: float, other: float, outside: float) -> list[Row]:
    def r(key: str, value: float, group: str, share_of: str) -> Row:
        return Row(key, key.removeprefix("sub:"), group, np.full(4, value), "test", share_of)

    forward = backbone + other + outside
    return [
        r("step", step, "step", "step"),
        r("upload", upload, "step", "step"),
        r("sub:backbone", backbone, "model", "forward"),
        r("sub:encoder", other, "model", "forward"),
        r("outside", outside, "model", "forward"),
        r("forward", forward, "model", "forward"),
    ]


def test_recommendations_follow_the_numbers() -> None:
    backbone_heavy = _result(rows=_rows(1e-3, 0.1e-3, 7e-3, 2e-3, 1e-3))
    text = " ".join(recommend(backbone_heavy))
    assert "backbone" in text and "70%" in text and "channels_last" in text
    assert "one batch" in text
    upload_heavy = _result(rows=_rows(1e-3, 0.4e-3, 1e-3, 1e-3, 0.2e-3), channels_last=True)
    text = " ".join(recommend(upload_heavy))
    assert "Upload is 40%" in text and "pinned" in text
    # channels_last is on already: not recommended again, said to be in use.
    assert "runner.channels_last: on" not in text and "already runs channels_last" in text
    preprocessing = _result(rows=_rows(1e-3, 0.0, 1e-3, 1e-3, 1e-3), tier="eager_fp32")
    text = " ".join(recommend(preprocessing))
    assert "outside submodules" in text and "captured region" in text
    refused = _result(
        rows=_rows(1e-3, 0.0, 1e-3, 1e-3, 0.1e-3),
        tier="eager_fp32",
        tiers=[
            {"name": "graph", "state": "skipped", "reason": "capture failed: a CPU tensor"},
            {"name": "compiled", "state": "skipped", "reason": "Unsupported: graph break"},
            {"name": "eager_half", "state": "skipped", "reason": "parity error 3e-2"},
            {"name": "eager_fp32", "state": "ready", "reason": ""},
        ],
    )
    text = " ".join(recommend(refused))
    assert "compiled was refused at start: Unsupported: graph break" in text
    assert "graph was refused at start: capture failed" in text
    slow = _result(rows=_rows(30e-3, 0.0, 1e-3, 1e-3, 0.1e-3))
    text = " ".join(recommend(slow))
    assert "exceeds runner.step_budget_ms" in text and "longer than a control period" in text


# -- the command line ------------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    from controller.cli import add_config_args, setup_logging
    from controller.tools.profile_cli import add_profile_parser

    parser = argparse.ArgumentParser(prog="tempo")
    add_profile_parser(parser.add_subparsers(dest="command"), add_config_args, setup_logging)
    return parser.parse_args(argv)


def test_cli_profile_and_compare_on_the_built_in_policy(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [a for item in FAST for a in ("--set", item)]
    args = _parse(["profile", *sets, "-n", "4", "--warmup", "1"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "policy step (predict_chunk)" in out and "ReachModule" in out

    args = _parse(
        [
            "profile",
            "compare",
            *sets,
            "--set",
            "execution.query_period=5",
            "-n",
            "4",
            "--warmup",
            "1",
            "--json",
        ]
    )
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "verdict:" in out and '"kind": "tempo-profile-compare"' in out
    assert "query_period 5" in out

    args = _parse(["profile", "compare", "-n", "4"])
    with pytest.raises(ConfigError, match="two config files"):
        args.func(args)
