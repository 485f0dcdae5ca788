"""The tier ladder on a GPU: capture, parity, output ownership, no device allocations while
serving, demotion, and tiers skipped for capture or compile failures."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.examples import random_observation  # noqa: E402
from controller.inference.faults import FaultPlan  # noqa: E402
from controller.inference.parity import relative_error  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.base import PolicySpec  # noqa: E402
from policies.tensor_policy import EagerPolicy, TensorPolicy  # noqa: E402
from policies.tiny import build_tiny_policy, tiny_spec  # noqa: E402

pytestmark = pytest.mark.gpu

SPEC = tiny_spec(cameras=2, height=96, width=128, state_size=6, joints=6, chunk_size=10)


def make_runner(cache_dir, policy=None, faults=None, **settings) -> Runner:  # type: ignore[no-untyped-def]
    settings.setdefault("step_budget_ms", None)  # timing noise must not demote here
    config = RunnerConfig(cache_dir=cache_dir, parity_observations=3, **settings)
    return Runner(policy or build_tiny_policy(SPEC), config, device="cuda", faults=faults)


@pytest.fixture(scope="module")
def runner(gpu_cache_dir) -> Runner:  # type: ignore[no-untyped-def]
    runner = make_runner(gpu_cache_dir)
    runner.start()
    return runner


def fp32_reference(observation) -> np.ndarray:  # type: ignore[no-untyped-def]
    return EagerPolicy(build_tiny_policy(SPEC), "cuda").predict_chunk(*observation)


def test_every_tier_passes_and_the_graph_serves(runner: Runner) -> None:
    assert runner.tier == "graph"
    assert runner.ready_tiers == ["graph", "compiled", "eager_half", "eager_fp32"]
    for tier in runner.status()["tiers"]:  # type: ignore[union-attr]
        assert tier["state"] == "ready" and tier["parity_error"] <= 1e-2, tier


def test_graph_output_matches_the_fp32_reference(runner: Runner) -> None:
    observation = random_observation(SPEC, 123)
    chunk = runner.predict_chunk(*observation)
    assert chunk.dtype == np.float32 and chunk.shape == (10, 6)
    assert relative_error(chunk, fp32_reference(observation)) <= 1e-2


def test_a_returned_chunk_is_not_changed_by_the_next_replay(runner: Runner) -> None:
    runner.use_tier("graph")
    first_obs, second_obs = random_observation(SPEC, 1), random_observation(SPEC, 2)
    first = runner.predict_chunk(*first_obs)
    kept = first.copy()
    second = runner.predict_chunk(*second_obs)
    assert not np.array_equal(first, second)  # the graph's own output memory did change
    np.testing.assert_array_equal(first, kept)


def test_serving_from_the_graph_allocates_nothing_on_the_device(runner: Runner) -> None:
    runner.use_tier("graph")
    observation = random_observation(SPEC, 3)
    runner.predict_chunk(*observation)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(50):
        runner.predict_chunk(*observation)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before


def test_graph_replay_is_faster_than_eager_fp32(runner: Runner) -> None:
    runner.predict_chunk(*random_observation(SPEC, 4))
    graph = np.median(runner.time_device("graph", 50))
    eager = np.median(runner.time_device("eager_fp32", 50))
    assert graph < eager, (graph, eager)


@pytest.mark.parametrize(
    ("plan", "cause"),
    [(FaultPlan(nan_on={1}), "non_finite"), (FaultPlan(raise_on={1}), "exception")],
)
def test_graph_failure_demotes_to_compiled_and_reruns_the_step(gpu_cache_dir, plan, cause) -> None:
    runner = make_runner(gpu_cache_dir, faults={"graph": plan})
    runner.start()
    observations = [random_observation(SPEC, 50 + i) for i in range(3)]
    chunks = [runner.predict_chunk(*obs) for obs in observations]
    assert runner.tier == "compiled"
    for observation, chunk in zip(observations, chunks, strict=True):
        assert np.isfinite(chunk).all()
        assert relative_error(chunk, fp32_reference(observation)) <= 1e-2
    (demotion,) = runner.demotions
    assert (demotion.from_tier, demotion.to_tier, demotion.cause) == ("graph", "compiled", cause)
    assert runner.status()["reruns"] == 1


class _HostSync(torch.nn.Module):
    """Reads a value back to the host mid-step: fine eagerly and compiled, refused in capture."""

    def __init__(self, spec: PolicySpec) -> None:
        super().__init__()
        self.shape = (spec.chunk_size, spec.action_dim)
        self.head = torch.nn.Linear(spec.state_size, spec.chunk_size * spec.action_dim)

    def forward(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        out = self.head(state[:, -1]).view(-1, *self.shape)
        scale = out.abs().amax().cpu()  # device -> host copy: a sync
        return out * (scale / scale).to(out.device)


class _DataDependent(torch.nn.Module):
    """Branches on a tensor value: no single graph exists, so fullgraph compiling fails."""

    def __init__(self, spec: PolicySpec) -> None:
        super().__init__()
        self.shape = (spec.chunk_size, spec.action_dim)
        self.head = torch.nn.Linear(spec.state_size, spec.chunk_size * spec.action_dim)

    def forward(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        out = self.head(state[:, -1]).view(-1, *self.shape)
        if state.sum() > 0:
            return out
        return -out


def test_capture_failure_skips_only_the_graph_tier(gpu_cache_dir) -> None:
    policy = TensorPolicy(SPEC, _HostSync(SPEC).eval())
    runner = make_runner(gpu_cache_dir, policy=policy)
    runner.start()
    tiers = {t["name"]: t for t in runner.status()["tiers"]}  # type: ignore[union-attr]
    assert tiers["graph"]["state"] == "skipped", tiers["graph"]
    assert runner.tier in ("compiled", "eager_half")
    assert np.isfinite(runner.predict_chunk(*random_observation(SPEC, 5))).all()


def test_compile_failure_skips_both_compiled_tiers(gpu_cache_dir) -> None:
    policy = TensorPolicy(SPEC, _DataDependent(SPEC).eval())
    runner = make_runner(gpu_cache_dir, policy=policy)
    runner.start()
    tiers = {t["name"]: t for t in runner.status()["tiers"]}  # type: ignore[union-attr]
    assert tiers["graph"]["state"] == tiers["compiled"]["state"] == "skipped"
    assert runner.tier == "eager_half"
    assert np.isfinite(runner.predict_chunk(*random_observation(SPEC, 6))).all()
