"""The runner's batched step: several robots' requests served in one step of a bucket
(controller.inference.buckets), each robot's chunk back on its own.

    results = runner.predict_batch([(images, context), ...])   # a Prediction or an exception each

A request alone is `predict`. A batch whose step raises, or whose row for a robot is not
finite, is not demoted from here: the robots it could not serve are re-run one by one through
`predict`, which owns the ladder's rules (demotion, re-run budget, telling a faulty observation
from a faulty tier), so a batch never decides differently from a robot alone. The runner's
lock is held for the whole batch.

The Runner owns one BatchServer and hands it what it reads and writes of the runner's serving:
the lock, the ladder, the tier reports, the step counts, the clock and how to serve a robot
alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from controller.errors import PolicyError
from controller.feed.batch_window import BatchWindow
from controller.feed.in_process_feed import InProcessFeed
from controller.feed.inference_feed import InferenceFeed
from controller.inference.buckets import Bucket, split_into_buckets, start_buckets
from controller.inference.examples import Example
from controller.inference.ladder import ServingLadder
from controller.inference.parity import all_finite
from controller.inference.progress import Progress, first_line
from controller.inference.staging import Item
from controller.inference.step_counts import StepCounts
from controller.inference.step_path import StepPath
from controller.inference.tier_report import TierReport
from controller.observe.telemetry import Telemetry
from controller.runner_config import RunnerConfig
from policies.base import Policy, Prediction, RobotContext
from policies.tensor_policy import TensorPolicy

Result = Prediction | Exception


class BatchServer:
    """The buckets above batch 1 and their steps."""

    def __init__(
        self,
        batch_sizes: tuple[int, ...],
        window_us: int,
        *,
        lock: threading.RLock,
        ladder: ServingLadder,
        reports: dict[str, TierReport],
        counts: StepCounts,
        clock: Callable[[], float],
        alone: Callable[[Mapping[str, np.ndarray], RobotContext], Prediction],
        prediction: Callable[[list[np.ndarray]], Prediction],
    ) -> None:
        """batch_sizes: the runner's (1 first); window_us: how long its feed waits for more.
        alone: the runner's predict, for a robot a batch could not serve; prediction: a
        step's outputs -> that robot's Prediction."""
        self.batch_sizes = batch_sizes
        self._window_us = window_us
        self._lock = lock
        self._ladder = ladder
        self._reports = reports
        self._counts = counts
        self._clock = clock
        self._predict_alone = alone
        self._prediction = prediction
        self._buckets: dict[int, Bucket] = {}

    def build(
        self,
        path: StepPath,
        ready: list[str],
        half_module: torch.nn.Module,
        config: RunnerConfig,
        policy: TensorPolicy,
        observations: list[Example],
        reference: list[list[np.ndarray]],
        say: Progress,
    ) -> None:
        """At the runner's start: build and check each bucket above 1 (buckets.start_buckets)."""
        self._buckets = start_buckets(
            path, self.batch_sizes, ready, path.module, half_module, config, policy,
            observations, reference, say,
        )  # fmt: skip

    def begin_serving(self) -> None:
        for bucket in self._buckets.values():
            for tier in bucket.tiers.values():
                tier.begin_serving()

    @property
    def paths(self) -> list[StepPath]:
        """Each bucket's step path (batch 1's is the runner's own)."""
        return [b.path for b in self._buckets.values()]

    def feed(self, policy: Policy, telemetry: Telemetry) -> InferenceFeed:
        """A thread of this process runs it (controller.feed.in_process_feed), batching robots
        as the window says (controller.feed.batch_window)."""
        window = BatchWindow(self._window_us, self.batch_sizes, self.step_times_s)
        return InProcessFeed(policy, telemetry, window)

    def status(self) -> dict[str, object]:
        return {
            "batch_sizes": list(self.batch_sizes),
            "steps_by_bucket": {str(k): v for k, v in sorted(self._counts.by_bucket.items())},
            "buckets": [b.as_dict() for b in list(self._buckets.values())],
        }

    def predict_batch(self, items: Sequence[Item]) -> list[Result]:
        """Each robot's observation and context -> its Prediction, or the exception `predict`
        would have raised for it alone (ValueError for a malformed observation, InputFault,
        PolicyError), in order. Nothing about a robot depends on who else is in its batch."""
        results: list[Result | None] = [None] * len(items)
        with self._lock:
            serving = self._ladder.serving
            sizes = [1, *(s for s, b in sorted(self._buckets.items()) if b.serves(serving))]
            start = 0
            for size, count in split_into_buckets(len(items), sizes):
                part = range(start, start + count)
                start += count
                if size > 1:
                    served = self._serve_batch(size, [items[i] for i in part])
                    for index, result in zip(part, served, strict=True):
                        results[index] = result
                for index in part:
                    if results[index] is None:  # batch 1, or a robot the batch could not serve
                        results[index] = self._alone(*items[index])
        return [r for r in results if r is not None]

    def _alone(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Result:
        try:
            return self._predict_alone(images, context)
        except Exception as exc:  # noqa: BLE001 - handed back as that robot's answer
            return exc

    def _serve_batch(self, size: int, items: list[Item]) -> list[Result | None]:
        """One step of bucket `size` over `items`; None for a robot to serve alone instead."""
        started = self._clock()
        ladder, bucket = self._ladder, self._buckets[size]
        name = ladder.serving
        if ladder.current is None or name is None:
            raise PolicyError("the runner is not started: call start() before predict")
        path = bucket.path
        results: list[Result | None] = [None] * len(items)
        try:
            with path.scope:
                refused = path.stage_rows(items)
                staged = [k for k, error in enumerate(refused) if error is None]
                rows = path.run_rows(bucket.tiers[name], len(staged)) if staged else []
        except Exception as exc:  # noqa: BLE001 - each robot is re-run alone, by the ladder
            self._counts.last_error = f"{name} (batch {size}): {first_line(exc)}"
            return results
        for k, error in enumerate(refused):
            if error is not None:
                results[k] = error
        for k, outputs in zip(staged, rows, strict=True):
            if all_finite(outputs):
                results[k] = self._prediction(outputs)
        if rows:
            bucket.steps += 1
            self._counts.served(size)
            self._reports[name].served_steps += 1
            ladder.record_step(self._clock() - started)
        return results

    def step_times_s(self) -> dict[int, float]:
        """Median step time per batch size that the serving tier serves (start-up's
        measure): what a robot's deadline allows for when batching waits."""
        name = self._ladder.serving
        first = self._reports[name].step_s if name in self._reports else None
        times = {1: first} if first is not None else {}
        for size, bucket in list(self._buckets.items()):
            if name in bucket.step_s:
                times[size] = bucket.step_s[name]
        return times
