"""What a runner has served so far, as its status shows it: steps, failures, re-runs, refused
observations, the last error and the steps of each batch size. One record, written by the
runner's single step (controller.inference.runner) and its batched one (batch_serving) under
the runner's lock, read by status from any thread.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field


@dataclass
class StepCounts:
    steps: int = 0
    failed_steps: int = 0
    reruns: int = 0
    input_faults: int = 0
    last_error: str = ""
    by_bucket: collections.Counter[int] = field(default_factory=collections.Counter)

    def served(self, batch_size: int) -> None:
        """One step served, of `batch_size` robots' bucket (1: a robot alone)."""
        self.steps += 1
        self.by_bucket[batch_size] += 1

    def as_dict(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "failed_steps": self.failed_steps,
            "reruns": self.reruns,
            "input_faults": self.input_faults,
        }
