"""What the daemon's status, the tools and the benchmarks read of a Runner
(controller.inference.runner): the serving tier and those ready below it, the status snapshot,
the module, codec and step path profiling tools time, and the benchmarks' use_tier and
time_device. Nothing here serves a step.
"""

from __future__ import annotations

import torch

from controller.errors import PolicyError
from controller.inference.batch_serving import BatchServing
from controller.inference.compile_cache import CompileCache
from controller.inference.step_path import StepPath
from controller.inference.tier_report import TierChange
from controller.inference.tiers import Tier
from controller.runner_config import RunnerConfig
from policies.inputs import InputCodec
from policies.tensor_policy import TensorPolicy


class RunnerInspection(BatchServing):
    """Mixed into Runner, whose attributes these are (set by its constructor and start)."""

    _policy: TensorPolicy
    _config: RunnerConfig
    _device: torch.device
    _tiers: dict[str, Tier]
    _path: StepPath | None
    _cache: CompileCache | None
    _start_s: float | None
    _start_phases: dict[str, float]

    @property
    def tier(self) -> str | None:
        """Name of the serving tier (None before start)."""
        return self._ladder.serving

    @property
    def outputs(self) -> tuple[str, ...]:
        """Names of the policy's extra outputs (its memory), after the chunk."""
        return self._codec.outputs

    @property
    def ready_tiers(self) -> list[str]:
        return list(self._ladder.tiers)

    @property
    def module(self) -> torch.nn.Module:
        """The policy's module: the one every tier runs (on the runner's device once started)."""
        return self._policy.module

    @property
    def codec(self) -> InputCodec:
        """How a robot's context becomes the module's inputs (for tools that fill the staging)."""
        return self._codec

    @property
    def step_path(self) -> StepPath:
        """The started runner's step path (staging, stream, download), for profiling tools that
        time its phases one by one; the serving path itself goes through predict."""
        return self._checked_path()

    @property
    def serving_tier(self) -> Tier:
        """The Tier object now serving (its name is `tier`); for profiling tools."""
        name = self._ladder.serving
        if name is None:
            raise PolicyError("the runner is not started: call start() first")
        return self._tiers[name]

    @property
    def demotions(self) -> list[TierChange]:
        return list(self._ladder.demotions)

    def status(self) -> dict[str, object]:
        """A JSON-able snapshot for the daemon's status and metrics. It does not wait for a
        step in progress (or a start-up): values are read as they are at that moment."""
        path = self._path
        return {
            "ready": self._ladder.current is not None,
            "tier": self.tier,
            "device": path.describe() if path else str(self._device),
            "channels_last": path.channels_last if path else None,
            "start_s": self._start_s,
            "start_phases": dict(self._start_phases),
            **dict(self._counts),
            "overruns": self._ladder.overruns,
            "last_error": self._last_error,
            "step_budget_ms": self._config.step_budget_ms,
            "tiers": [r.as_dict() for r in list(self._reports.values())],
            "demotions": [d.as_dict() for d in list(self._ladder.demotions)],
            "promotions": [p.as_dict() for p in list(self._ladder.promotions)],
            "compile_cache": self._cache.as_dict() if self._cache else None,
            **self._batch_status(),
        }

    def use_tier(self, name: str) -> None:
        """Serve from `name` (a tier that passed start-up) without recording a demotion: for
        benchmarks and tests, never for the daemon."""
        with self._lock:
            self._ladder.use(name)

    def time_device(self, name: str, iterations: int = 100) -> list[float]:
        """Seconds per step of tier `name` on the last uploaded observation: CUDA-event time of
        the model alone on a GPU (no upload or download), wall time on a CPU. For benchmarks."""
        with self._lock:
            return self._checked_path().time_device(self._tiers[name], iterations)
