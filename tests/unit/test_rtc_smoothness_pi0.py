"""scripts.smoothness.rtc_smoothness's pi0 path at a trivial size (a tiny pi0, a few training
steps, a few simulated chunks): the training moves the action expert alone, every method gives
finite metrics, the chunks hand over as the daemon's `newest` execution does, RTC pulls the new
chunk onto the previous plan, and the command line runs end to end."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest
import torch

from policies.flow.settings import RTCConfig
from scripts.smoothness import rtc_smoothness

CHUNK, HORIZON, STEPS, WARMUP, DELAY = 8, 4, 28, 8, 2
METHODS = ("switching", "ensembling", "rtc-exact", "rtc-stop_grad", "rtc-inpaint")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is the faster here


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return rtc_smoothness


@pytest.fixture(scope="module")
def model(script: ModuleType) -> object:
    torch.set_num_threads(1)
    return script.make_model("pi0", CHUNK, 3, 0)


def run(script: ModuleType, model: object, method: str, delay: int = DELAY) -> tuple:
    chunks: list[tuple[int, np.ndarray]] = []
    executed, boundaries, gaps = script.simulate(
        model, method, delay, HORIZON, STEPS, RTCConfig(), chunks=chunks
    )
    return executed, boundaries, gaps, chunks


def test_training_moves_the_action_expert_and_leaves_vision_and_language(
    script: ModuleType, model: object
) -> None:
    untrained = script.make_model("pi0", CHUNK, 0, 0).module.network.state_dict()
    trained = model.module.network.state_dict()  # type: ignore[attr-defined]
    changed = {k for k in trained if not torch.equal(trained[k], untrained[k])}
    assert any(k.startswith("paligemma_with_expert.gemma_expert.model.") for k in changed)
    assert {"action_in_proj.weight", "action_out_proj.weight", "state_proj.weight"} <= changed
    assert not [k for k in changed if k.startswith("paligemma_with_expert.paligemma.")]


def test_every_method_gives_finite_metrics(script: ModuleType, model: object) -> None:
    for method in METHODS:
        executed, boundaries, gaps, _ = run(script, model, method)
        assert np.isfinite(executed).all(), method
        metrics = script.measure(executed, boundaries, gaps, WARMUP)
        assert all(math.isfinite(value) for value in metrics), (method, metrics)


@pytest.mark.parametrize("method", ["switching", "rtc-exact", "rtc-stop_grad", "rtc-inpaint"])
def test_the_old_chunk_plays_its_first_d_actions_then_the_new_one(
    script: ModuleType, model: object, method: str
) -> None:
    executed, boundaries, _, chunks = run(script, model, method)
    assert boundaries == [start + DELAY for start, _ in chunks]
    for (old_start, old), (start, new) in zip(chunks, chunks[1:], strict=False):
        offset = start - old_start
        np.testing.assert_allclose(executed[start : start + DELAY], old[offset : offset + DELAY])
        np.testing.assert_allclose(executed[start + DELAY], new[DELAY])


def test_inpaint_ends_the_first_d_actions_on_the_previous_plan(
    script: ModuleType, model: object
) -> None:
    _, _, _, chunks = run(script, model, "rtc-inpaint")
    for (old_start, old), (start, new) in zip(chunks, chunks[1:], strict=False):
        offset = start - old_start
        np.testing.assert_allclose(new[:DELAY], old[offset : offset + DELAY], atol=1e-5)


def test_guidance_brings_the_new_chunk_closer_to_the_plan_than_switching(
    script: ModuleType, model: object
) -> None:
    def mean_gap(method: str) -> float:
        _, boundaries, gaps, _ = run(script, model, method)
        return float(np.mean([g for b, g in zip(boundaries, gaps, strict=True) if b >= WARMUP]))

    switching = mean_gap("switching")
    for method in ("rtc-exact", "rtc-stop_grad", "rtc-inpaint"):
        assert mean_gap(method) < 0.5 * switching, method


def test_the_command_line_runs_pi0_with_its_jacobian_profile(
    script: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    script.main(
        ["--family", "pi0", "--chunk", str(CHUNK), "--horizon", str(HORIZON), "--steps"]
        + [str(STEPS), "--warmup", str(WARMUP), "--train-steps", "2", "--delays", "0", "2"]
        + ["--jacobian"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("pi0: H 8, s 4") for line in lines)
    assert any("RTC beta 10.0, overlap 8 rows" in line for line in lines)  # pi0: 10, cut to H
    rows = [line.split() for line in lines if line.split()[:1] in [[m] for m in METHODS]]
    assert [(row[0], row[1]) for row in rows] == [(m, d) for d in "02" for m in METHODS]
    profile = lines[lines.index("t  weight  sigma max  sigma median    gain".rjust(46)) + 1 :]
    assert len(profile) == 10  # pi0's Euler steps
    assert all(math.isfinite(float(x)) for line in profile for x in line.split())
