"""The runner: serves one TensorPolicy from the highest tier that passes its checks.

    runner = Runner(policy, RunnerConfig(), device="cuda")
    runner.start(progress=print)            # build, warm up, capture, parity; minutes when cold
    prediction = runner.predict(images, context)  # the Policy contract (context: RobotContext)
    chunk = runner.predict_chunk(images, state)   # the raw step on a state window, for tools
    results = runner.predict_batch([(images, context), ...])  # several robots in one step
Several robots waiting at once are served in one step of a batch-size bucket (`batch_sizes`;
controller.inference.batch_serving, a BatchServer the runner owns); batch 1 is the bucket of
size 1. The status snapshot is a RunnerReport's (controller.inference.runner_report).

Tiers, highest first: graph (compiled + CUDA graph), compiled, eager_half, eager_fp32 (the
reference; see `controller.runner_config`). At start every tier from `top_tier` down is built,
warmed up and checked against eager_fp32 on random observations (`parity_rtol`, all outputs
finite; against a quantized checkpoint's reference chunks too, or with the policy's own
`parity` measure: see tier_checks). A tier that fails is skipped, with the reason logged and in
`status()`; every tier that passed stays ready as a fallback. What the model may ask of the
tiers (its precision scope, compile options) is declared in policies.model_hooks.

Serving, a tier that raises, returns a non-finite chunk or overruns its budget k of n steps is
demoted at once (a failed step re-run below when it fits the budget); after a cool-down, higher
tiers may be re-checked and promoted (controller.inference.ladder; one step's walk down the
ladder is controller.inference.ladder_step). One thread calls predict
(its feed's); status() may be read from any thread.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from controller.errors import PolicyError
from controller.feed.inference_feed import InferenceFeed
from controller.feed.served_policy import ServedInProcess
from controller.inference.batch_serving import BatchServer, Result
from controller.inference.buckets import batch_sizes_for
from controller.inference.examples import Example, random_example
from controller.inference.faults import FaultPlan
from controller.inference.host_weights import check_host_weights
from controller.inference.ladder import ServingLadder
from controller.inference.ladder_step import LadderStep
from controller.inference.progress import Progress
from controller.inference.runner_report import RunnerReport
from controller.inference.staging import Item
from controller.inference.step_counts import StepCounts
from controller.inference.step_path import StepPath
from controller.inference.tier_checks import (
    reference_at_start,
    repromote,
    start_tiers,
)
from controller.inference.tier_report import TierChange, TierReport
from controller.inference.tiers import Tier
from controller.inference.weights_phase import place_weights
from controller.observe.telemetry import Telemetry
from controller.runner_config import TIER_ORDER, RunnerConfig
from policies.base import PolicySpec, Prediction, RobotContext, window_context
from policies.inputs import InputCodec
from policies.tensor_policy import TensorPolicy

log = logging.getLogger(__name__)


class Runner(ServedInProcess):
    """A Policy served through the tier ladder. The constructor does no work; `start` does."""

    def __init__(
        self,
        policy: TensorPolicy,
        config: RunnerConfig | None = None,
        device: str | torch.device | None = None,
        faults: Mapping[str, FaultPlan] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        batch_sizes: Sequence[int] = (1,),
        batch_window_us: int = 0,
    ) -> None:
        """device: default cuda when available, else cpu. faults: tier name -> FaultPlan, and
        clock: what step times are measured with (seconds); both for tests. batch_sizes: the
        buckets of robots served in one step (execution.batch_sizes; 1 is always one), and
        batch_window_us how long its feed waits for more (execution.batch_window_us)."""
        self._telemetry: Telemetry | None = None
        self._policy = policy
        self._codec = policy.inputs
        self._config = config or RunnerConfig()
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._device = torch.device(device)
        if self._device.type == "cuda" and self._device.index is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        unknown = set(faults or {}) - set(TIER_ORDER)
        if unknown:
            raise ValueError(f"faults name unknown tiers {sorted(unknown)}; tiers: {TIER_ORDER}")
        self._faults = dict(faults or {})
        self._clock = clock
        self._lock = threading.RLock()
        self._tiers: dict[str, Tier] = {}
        self._reports: dict[str, TierReport] = {}
        self._ladder = ServingLadder(self._config)
        self._counts = StepCounts()
        self._seed = 0
        self._path: StepPath | None = None
        self._reference: Tier | None = None
        self._ladder_step: LadderStep | None = None
        # The module the half-precision tiers run (its weights cast once, at start); the
        # profile's eager phase timing runs it too, as served. None before start.
        self.half_module: nn.Module | None = None
        self._batch = BatchServer(
            batch_sizes_for(policy, batch_sizes), batch_window_us, lock=self._lock,
            ladder=self._ladder, reports=self._reports, counts=self._counts, clock=clock,
            alone=self.predict, prediction=self._prediction,
        )  # fmt: skip
        self._report = RunnerReport(
            self._ladder, self._counts, self._reports, self._config, self._batch, self._device
        )

    # ---- Policy protocol -------------------------------------------------------------------

    @property
    def spec(self) -> PolicySpec:
        return self._policy.spec

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        """The Policy contract: one robot's observation and context -> its chunk (a new float32
        array (chunk_size, action_dim) that nothing in the runner touches again) and, for a
        policy with extra outputs, the robot's new memory. Nothing about the robot stays here.

        If the serving tier raises or returns a non-finite output, it is demoted and the same
        observation is re-run on the next tier when the time spent so far plus that tier's
        measured step time fits in `step_budget_ms` (always, with no budget); otherwise this call
        raises PolicyError and the next call is served by the new tier. The daemon then keeps
        playing the chunks it already has. PolicyError also when no lower tier is left. A
        malformed observation (camera missing, wrong shape or dtype) raises ValueError.
        """
        return self._prediction(self._step(images, context))

    def predict_chunk(self, images: Mapping[str, np.ndarray], state: np.ndarray) -> np.ndarray:
        """The raw step on a (state_history, state_size) window, outside any robot's session
        (benchmarks, tools): `predict` with a context that is just the window, and for a
        policy that reads a prompt, the codec's example prompt (a tool has no robot's task)."""
        context = window_context(state)
        if self.spec.prompt is not None:
            context = dataclasses.replace(context, prompt=self._codec.example(0).prompt)
        return self.predict(images, context).actions

    def predict_batch(self, items: Sequence[Item]) -> list[Result]:
        """Each robot's observation and context -> its Prediction, or the exception `predict`
        would have raised for it alone, in order (controller.inference.batch_serving)."""
        return self._batch.predict_batch(items)

    def _prediction(self, outputs: list[np.ndarray]) -> Prediction:
        names = self._codec.outputs
        if not names:
            return Prediction(outputs[0])
        return Prediction(outputs[0], dict(zip(names, outputs[1:], strict=True)))

    def _step(self, images: Mapping[str, np.ndarray], context: RobotContext) -> list[np.ndarray]:
        started = self._clock()
        with self._lock:
            if self._ladder.current is None:
                raise PolicyError("the runner is not started: call start() before predict")
            if self._ladder.repromote_due():
                self._try_repromote_locked()
            step = self._ladder_step
            if step is None:  # unreachable once started; keeps the type checker honest
                raise PolicyError("the runner is not started: call start() before predict")
            return step.serve(images, context, started)

    # ---- start-up ----------------------------------------------------------------------------

    def start(self, progress: Progress | None = None) -> None:
        """Build, warm up and check every tier from `top_tier` down; serve the best that passed.

        progress(message) is called with human-readable progress (also from a helper thread,
        while a compile runs). Raises PolicyError when no tier passes."""
        with self._lock:
            if self._ladder.current is not None:
                raise PolicyError("the runner is already started")
            started = time.perf_counter()

            def say(message: str) -> None:
                log.info("%s", message)
                if progress is not None:
                    progress(message)

            if self._device.type == "cuda" and not torch.cuda.is_available():
                raise PolicyError("the runner was asked for CUDA, but torch sees no CUDA device")
            if self._config.reference_weights == "host":
                check_host_weights(self._policy.module, self._device)
            config = self._config
            self._path = path = StepPath(
                self.spec, self._policy.module, self._device, config, self._codec
            )
            placed = place_weights(
                path, self.spec, config, self._faults, self._reports, self._examples, say,
                started,
            )  # fmt: skip
            self.half_module, self._tiers = placed.half_module, placed.tiers
            self._reference = placed.reference
            self._ladder_step = LadderStep(
                path, placed.tiers, placed.reference, self._ladder, self._reports,
                self._counts, self._clock,
            )  # fmt: skip
            self._report.cache_opened(placed.cache)
            observations = placed.examples
            # Where start() spent its time: "weights" (placing the model, half copy, compile
            # cache), "reference" (the FP32 reference pass), each tier, "the rest" (batch
            # buckets, cache save).
            phases = {"weights": time.perf_counter() - started}
            self._report.start_began(phases)
            reference = reference_at_start(path, placed.reference, observations)
            phases["reference"] = time.perf_counter() - started - sum(phases.values())
            ready = start_tiers(
                path, self._tiers, self._reports, self._policy, self._config,
                observations, reference, say, phases,
            )  # fmt: skip
            self._batch.build(
                path, ready, placed.half_module, config, self._policy, observations,
                reference.outputs, say,
            )  # fmt: skip
            if placed.cache is not None and {"graph", "compiled"} & set(ready):
                placed.cache.save()
            self._batch.begin_serving()
            for tier in self._tiers.values():
                tier.begin_serving()
            if self._telemetry is not None:
                for each in self._step_paths():
                    each.enable_telemetry(self._telemetry)
            self._ladder.begin(ready, {name: self._reports[name].step_s for name in ready})
            took = time.perf_counter() - started
            self._report.started(took)
            phases["the rest"] = took - sum(phases.values())
            say(
                f"policy started in {took:.1f} s: serving from {ready[0]} "
                f"(fallbacks: {', '.join(ready[1:]) or 'none'}); "
                + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
            )

    def _examples(self) -> list[Example]:
        count = self._config.parity_observations
        return [random_example(self.spec, self._codec, self._next_seed()) for _ in range(count)]

    def _checked_path(self) -> StepPath:
        if self._path is None:
            raise PolicyError("the runner is not started: call start() first")
        return self._path

    # ---- re-promotion ------------------------------------------------------------------------

    def try_repromote(self) -> bool:
        """Give the tiers above the serving one a fresh parity check; serve the highest that
        passes. Returns whether the tier changed. Takes several steps' time: call it from the
        inference thread when a delay is acceptable (predict calls it after the cool-down
        when `repromote_after_s` is set)."""
        with self._lock:
            return self._try_repromote_locked()

    def _try_repromote_locked(self) -> bool:
        if not self._ladder.current:
            return False
        observations = self._examples()
        if self._reference is None:  # unreachable once started
            return False
        return repromote(
            self._ladder, self._checked_path(), self._reference, self._tiers, self._policy,
            self._config, observations,
        )  # fmt: skip

    # ---- serving wiring ----------------------------------------------------------------------

    def add_pinned_region(self, address: int, size: int) -> None:
        """Frames in this page-locked host memory are uploaded by one DMA (see staging)."""
        self._checked_path().staging.add_pinned_region(address, size)

    def remove_pinned_region(self, address: int, size: int) -> None:
        self._checked_path().staging.remove_pinned_region(address, size)

    def attach_telemetry(self, telemetry: Telemetry) -> None:
        """Record every serving step's upload, model (per tier) and postprocess into
        `telemetry` (start-up steps are never recorded). Before or after `start`; call it
        before serving starts, which is then the sections' one writer."""
        with self._lock:
            self._telemetry = telemetry
            if self._path is not None and self._ladder.current is not None:
                for each in self._step_paths():
                    each.enable_telemetry(telemetry)

    serving = True  # the served-policy contract (feed.served_policy): here, always answering

    def feed(self, telemetry: Telemetry) -> InferenceFeed:
        """A thread of this process runs it, batching robots as `batch_window_us` says."""
        return self._batch.feed(self, telemetry)

    def step_times_s(self) -> dict[int, float]:
        """Median step time per batch size that the serving tier serves (start-up's measure)."""
        return self._batch.step_times_s()

    def _step_paths(self) -> list[StepPath]:
        """Batch 1's step path, then each larger bucket's."""
        return [self._checked_path(), *self._batch.paths]

    # ---- what status, tools and benchmarks read ----------------------------------------------

    def status(self) -> dict[str, object]:
        """A JSON-able snapshot for the daemon's status and metrics, read without waiting for a
        step in progress or a start-up (controller.inference.runner_report)."""
        return self._report.status(self._path)

    @property
    def steps_by_bucket(self) -> Counter[int]:
        """Steps served so far per batch size (1: a robot alone); a copy."""
        return Counter(self._counts.by_bucket)

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
    def demotions(self) -> list[TierChange]:
        return list(self._ladder.demotions)

    @property
    def policy(self) -> TensorPolicy:
        """The TensorPolicy served (its spec, module and input codec)."""
        return self._policy

    @property
    def module(self) -> nn.Module:
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

    def _next_seed(self) -> int:
        self._seed += 1
        return 1_000_003 * self._seed
