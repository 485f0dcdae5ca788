"""What the daemon's status reads of a Runner (controller.inference.runner): a JSON-able
snapshot of its serving tier and those ready below it, its steps and errors, its start-up and
its batch buckets. The Runner owns one RunnerReport and hands it the objects it reads; the
report serves nothing.
"""

from __future__ import annotations

import torch

from controller.inference.batch_serving import BatchServer
from controller.inference.compile_cache import CompileCache
from controller.inference.ladder import ServingLadder
from controller.inference.step_counts import StepCounts
from controller.inference.step_path import StepPath
from controller.inference.tier_report import TierReport
from controller.runner_config import RunnerConfig


class RunnerReport:
    def __init__(
        self,
        ladder: ServingLadder,
        counts: StepCounts,
        reports: dict[str, TierReport],
        config: RunnerConfig,
        batch: BatchServer,
        device: torch.device,
    ) -> None:
        self._ladder = ladder
        self._counts = counts
        self._reports = reports
        self._config = config
        self._batch = batch
        self._device = device
        self._start_s: float | None = None
        self._start_phases: dict[str, float] = {}
        self._cache: CompileCache | None = None

    def start_began(self, phases: dict[str, float]) -> None:
        """Where start-up spends its time: `phases`, which start-up goes on filling (status
        shows each phase once it is done)."""
        self._start_phases = phases

    def cache_opened(self, cache: CompileCache | None) -> None:
        self._cache = cache

    def started(self, seconds: float) -> None:
        self._start_s = seconds

    def status(self, path: StepPath | None) -> dict[str, object]:
        """A JSON-able snapshot for the daemon's status and metrics. It does not wait for a
        step in progress (or a start-up): values are read as they are at that moment.
        path: the runner's batch-1 step path, None before start."""
        ladder, counts = self._ladder, self._counts
        return {
            "ready": ladder.current is not None,
            "tier": ladder.serving,
            "device": path.describe() if path else str(self._device),
            "channels_last": path.channels_last if path else None,
            "start_s": self._start_s,
            "start_phases": dict(self._start_phases),
            **counts.as_dict(),
            "overruns": ladder.overruns,
            "last_error": counts.last_error,
            "step_budget_ms": self._config.step_budget_ms,
            "tiers": [r.as_dict() for r in list(self._reports.values())],
            "demotions": [d.as_dict() for d in list(ladder.demotions)],
            "promotions": [p.as_dict() for p in list(ladder.promotions)],
            "compile_cache": self._cache.as_dict() if self._cache else None,
            **self._batch.status(),
        }
