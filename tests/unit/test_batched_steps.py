"""Several robots in one step (controller.inference.buckets, batch_serving): a robot's chunk must
not depend on who else is in its batch, on its row, or on the padding.

Exactly equal: the same robot's chunk in every batch of one bucket (any company, any row, any
padding). Against the robot alone (batch 1) the FP32 CPU kernels differ in the last bits: a
linear layer of one row runs a matrix-vector kernel, of several rows a matrix-matrix one that
sums in another order, so that comparison allows 1e-5 relative (it fails for a row mix-up,
whose error is of order one).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from controller.errors import PolicyError
from controller.inference.buckets import split_into_buckets
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.base import Prediction, RobotContext
from policies.demo import make_demo_flow_policy, make_demo_policy
from policies.flow.rtc import serve_with_rtc
from policies.flow.settings import RTCConfig
from policies.inputs import InputCodec, example_frames
from policies.tdmpc2.serving import random_tdmpc2_policy
from policies.tensor_policy import TensorPolicy
from policies.tiny.policy import build_tiny_policy
from tests.unit.test_tdmpc2_planner import small_config

Item = tuple[dict[str, np.ndarray], RobotContext]


def tiny() -> TensorPolicy:
    return build_tiny_policy()


def act() -> TensorPolicy:
    return make_demo_policy(cameras=(("front", 32, 32),), chunk_size=6)


def flow() -> TensorPolicy:
    return make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=8, dim_model=16)


def flow_rtc() -> TensorPolicy:
    return serve_with_rtc(flow(), RTCConfig(mode="exact", beta=10.0))


def tdmpc2() -> TensorPolicy:
    return random_tdmpc2_policy(small_config())


FAMILIES = {"tiny": tiny, "act": act, "flow": flow, "flow_rtc": flow_rtc, "tdmpc2": tdmpc2}


def started(policy: TensorPolicy, sizes: tuple[int, ...] = (1, 2, 4)) -> Runner:
    config = RunnerConfig(
        top_tier="eager_fp32", cache_dir=None, step_budget_ms=None, parity_observations=2,
        warmup_steps=1,
    )  # fmt: skip
    runner = Runner(policy, config, device="cpu", batch_sizes=sizes)
    runner.start()
    return runner


def robots(policy: TensorPolicy, count: int) -> list[Item]:
    """`count` different robots: frames, state, and each its own step, plan, delay and memory
    where the codec reads them (the codec's examples; TD-MPC2's with its fixed noise bank)."""
    items = []
    for k in range(count):
        context = policy.inputs.example(11 + 7 * k)
        if context.previous_plan is None:  # a different step: a flow policy's noise differs
            context = dataclasses.replace(context, step=3 + k)
        items.append((example_frames(policy.spec, 100 + k), context))
    return items


def outputs(result: object) -> list[np.ndarray]:
    assert isinstance(result, Prediction), result
    return [result.actions, *(result.memory or {}).values()]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def served(request: pytest.FixtureRequest) -> tuple[Runner, list[Item]]:
    policy = FAMILIES[request.param]()
    return started(policy), robots(policy, 4)


def test_each_robots_chunk_in_a_batch_is_its_chunk_alone(served) -> None:  # type: ignore[no-untyped-def]
    runner, items = served
    batch = runner.predict_batch(items)
    assert runner.status()["steps_by_bucket"].get("4") == 1  # one step of four robots
    for item, result in zip(items, batch, strict=True):
        alone = runner.predict(*item)
        for got, want in zip(outputs(result), outputs(alone), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    first = outputs(batch[0])[0]
    assert not np.allclose(first, outputs(batch[1])[0], atol=1e-3)  # the robots differ


def test_company_row_and_padding_do_not_change_a_chunk(served) -> None:  # type: ignore[no-untyped-def]
    """Three robots in a bucket of four (one padding row) in every row, with the fourth robot,
    all four, and pairs in the bucket of two. In the same bucket and row a robot's outputs are
    exactly equal whoever else is in the batch; moved to another row they are equal within the
    kernels' rounding (see the module doc: a CPU GEMM may sum row 0 and row 1 of two rows in
    different orders)."""
    runner, items = served
    a, b, c, d = items
    seen: dict[tuple[int, int, int], list[np.ndarray]] = {}  # (robot, bucket, row) -> outputs
    orders = [(a, b, c), (c, a, b), (b, c, a), (d, c, a), (d, b, c, a), (a, b, c, d)]
    orders += [(a, b), (b, a), (a, d), (d, b)]
    for order in orders:
        bucket = 2 if len(order) <= 2 else 4
        for row, (item, result) in enumerate(
            zip(order, runner.predict_batch(list(order)), strict=True)
        ):
            got = outputs(result)
            key = (next(k for k, x in enumerate(items) if x is item), bucket, row)
            for exact, was in zip(got, seen.setdefault(key, got), strict=True):
                np.testing.assert_array_equal(exact, was)  # same row: who else does not matter
            first = next(v for k, v in seen.items() if k[0] == key[0])
            for close, was in zip(got, first, strict=True):
                np.testing.assert_allclose(close, was, rtol=1e-5, atol=1e-6)
    assert {k[2] for k in seen if k[0] == 0 and k[1] == 4} == {0, 1, 2, 3}  # every row tried


def test_the_buckets_a_batch_is_split_into() -> None:
    assert split_into_buckets(3, [1, 2, 4]) == [(4, 3)]
    assert split_into_buckets(5, [1, 2, 4]) == [(4, 4), (1, 1)]
    assert split_into_buckets(2, [1, 2, 4]) == [(2, 2)]
    assert split_into_buckets(9, [1, 4]) == [(4, 4), (4, 4), (1, 1)]
    assert split_into_buckets(3, [1]) == [(1, 1)] * 3


def test_a_malformed_observation_is_refused_alone() -> None:
    runner = started(tiny())
    items = robots(runner.policy, 3)
    broken = dict(items[1][0], cam0=np.zeros((2, 2, 3), np.uint8))
    results = runner.predict_batch([items[0], (broken, items[1][1]), items[2]])
    assert isinstance(results[1], ValueError) and "cam0" in str(results[1])
    for item, result in zip([items[0], items[2]], [results[0], results[2]], strict=True):
        alone = runner.predict(*item).actions
        np.testing.assert_allclose(outputs(result)[0], alone, rtol=1e-5, atol=1e-6)


class _Unbatchable(InputCodec):
    batch_refusal = "its module keeps each robot's memory inside itself"


def test_a_policy_that_cannot_batch_keeps_batch_one(caplog: pytest.LogCaptureFixture) -> None:
    policy = tiny()
    policy = dataclasses.replace(policy, codec=_Unbatchable(policy.spec))
    with caplog.at_level("INFO"):
        runner = started(policy)
    assert runner.status()["batch_sizes"] == [1]
    assert "keeps each robot's memory inside itself" in caplog.text
    runner.predict_batch(robots(policy, 3))
    assert runner.status()["steps_by_bucket"] == {"1": 3}


def test_a_bucket_whose_tier_fails_is_dropped_and_batch_one_serves() -> None:
    policy = tiny()

    class RowsOfOne(type(policy.module)):  # type: ignore[misc]
        def forward(self, images, state):  # type: ignore[no-untyped-def]
            if images.shape[0] > 2:
                raise RuntimeError("no batches over 2 here")
            return super().forward(images, state)

    policy.module.__class__ = RowsOfOne
    runner = started(policy)
    buckets = {b["size"]: b for b in runner.status()["buckets"]}  # type: ignore[index,union-attr,attr-defined]
    assert "no batches over 2" in buckets[4]["skipped"]["eager_fp32"]
    assert buckets[2]["step_ms"]
    results = runner.predict_batch(robots(policy, 3))  # 2 in a batch of 2, then 1 alone
    assert all(isinstance(r, Prediction) for r in results)
    assert runner.status()["steps_by_bucket"] == {"1": 1, "2": 1}


def test_predict_batch_before_start_says_so() -> None:
    runner = Runner(tiny(), RunnerConfig(top_tier="eager_fp32", cache_dir=None), device="cpu")
    results = runner.predict_batch(robots(runner.policy, 2))
    assert all(isinstance(r, PolicyError) and "start()" in str(r) for r in results)
