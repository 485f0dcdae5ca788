"""The runner's batched step: several robots' requests served in one step of a bucket
(controller.inference.buckets), each robot's chunk back on its own.

    results = runner.predict_batch([(images, context), ...])   # a Prediction or an exception each

A request alone is `predict`. A batch whose step raises, or whose row for a robot is not
finite, is not demoted from here: the robots it could not serve are re-run one by one through
`predict`, which owns the ladder's rules (demotion, re-run budget, telling a faulty observation
from a faulty tier), so a batch never decides differently from a robot alone. The runner's
lock is held for the whole batch.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from controller.errors import PolicyError
from controller.feed.batch_window import BatchWindow
from controller.feed.in_process_feed import InProcessFeed
from controller.feed.inference_feed import InferenceFeed
from controller.feed.served_policy import ServedInProcess
from controller.inference.buckets import Bucket, split_into_buckets
from controller.inference.ladder import ServingLadder
from controller.inference.parity import all_finite
from controller.inference.progress import first_line
from controller.inference.staging import Item
from controller.inference.step_path import StepPath
from controller.inference.tier_report import TierReport
from controller.observe.telemetry import Telemetry
from policies.base import Prediction, RobotContext
from policies.inputs import InputCodec

Result = Prediction | Exception


class BatchServing(ServedInProcess):
    """Mixed into Runner, whose attributes these are."""

    _lock: threading.RLock
    _ladder: ServingLadder
    _buckets: dict[int, Bucket]
    _reports: dict[str, TierReport]
    _counts: dict[str, int]
    _clock: Callable[[], float]
    _last_error: str
    steps_by_bucket: collections.Counter[int]

    @property
    def tier(self) -> str | None:
        raise NotImplementedError

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        raise NotImplementedError

    _codec: InputCodec
    _batch_sizes: tuple[int, ...]
    _window_us: int

    def _checked_path(self) -> StepPath:
        raise NotImplementedError

    def _prediction(self, outputs: list[np.ndarray]) -> Prediction:
        names = self._codec.outputs
        if not names:
            return Prediction(outputs[0])
        return Prediction(outputs[0], dict(zip(names, outputs[1:], strict=True)))

    def _step_paths(self) -> list[StepPath]:
        """Batch 1's step path, then each larger bucket's."""
        return [self._checked_path(), *(b.path for b in self._buckets.values())]

    def feed(self, telemetry: Telemetry) -> InferenceFeed:
        """A thread of this process runs it (controller.feed.in_process_feed), batching robots
        as the window says (controller.feed.batch_window)."""
        window = BatchWindow(self._window_us, self._batch_sizes, self.step_times_s)
        return InProcessFeed(self, telemetry, window)  # type: ignore[arg-type]

    def _batch_status(self) -> dict[str, object]:
        return {
            "batch_sizes": list(self._batch_sizes),
            "steps_by_bucket": {str(k): v for k, v in sorted(self.steps_by_bucket.items())},
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
            return self.predict(images, context)
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
            self._last_error = f"{name} (batch {size}): {first_line(exc)}"
            return results
        for k, error in enumerate(refused):
            if error is not None:
                results[k] = error
        for k, outputs in zip(staged, rows, strict=True):
            if all_finite(outputs):
                results[k] = self._prediction(outputs)
        if rows:
            bucket.steps += 1
            self.steps_by_bucket[size] += 1
            self._reports[name].served_steps += 1
            self._counts["steps"] += 1
            ladder.record_step(self._clock() - started)
        return results

    def step_times_s(self) -> dict[int, float]:
        """Median step time per batch size that the serving tier serves (start-up's
        measure): what a robot's deadline allows for when batching waits."""
        name = self.tier
        first = self._reports[name].step_s if name in self._reports else None
        times = {1: first} if first is not None else {}
        for size, bucket in list(self._buckets.items()):
            if name in bucket.step_s:
                times[size] = bucket.step_s[name]
        return times
