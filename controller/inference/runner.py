"""The runner: serves one TensorPolicy from the highest tier that passes its checks.

    runner = Runner(policy, RunnerConfig(), device="cuda")
    runner.start(progress=print)            # build, warm up, capture, parity; minutes when cold
    prediction = runner.predict(images, context)  # the Policy contract (context: RobotContext)
    chunk = runner.predict_chunk(images, state)   # the raw step on a state window, for tools
    results = runner.predict_batch([(images, context), ...])  # several robots in one step
Several robots waiting at once are served in one step of a batch-size bucket (`batch_sizes`;
controller.inference.batch_serving); batch 1 is the bucket of size 1. What the status, tools
and benchmarks read of a runner is in controller.inference.runner_inspection.

Tiers, highest first: graph (compiled + CUDA graph), compiled, eager_half, eager_fp32 (the
reference; see `controller.runner_config`). At start every tier from `top_tier` down is built,
warmed up and checked against eager_fp32 on random observations (`parity_rtol`, all outputs
finite; against a quantized checkpoint's reference chunks too, or with the policy's own
`parity` measure: see tier_checks). A tier that fails is skipped, with the reason logged and in
`status()`; every tier that passed stays ready as a fallback. What the model may ask of the
tiers (its precision scope, compile options) is declared in policies.model_hooks.

Serving, a tier that raises, returns a non-finite chunk or overruns its budget k of n steps is
demoted at once (a failed step re-run below when it fits the budget); after a cool-down, higher
tiers may be re-checked and promoted (controller.inference.ladder). One thread calls predict
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

from controller.errors import InputFault, PolicyError
from controller.inference.buckets import Bucket, batch_sizes_for, start_buckets
from controller.inference.compile_cache import CompileCache, open_compile_cache
from controller.inference.examples import Example, random_example
from controller.inference.faults import FaultPlan, FaultyTier
from controller.inference.host_weights import check_host_weights, stream_host_weights
from controller.inference.ladder import ServingLadder
from controller.inference.parity import NonFiniteOutput, all_finite
from controller.inference.progress import Progress, first_line
from controller.inference.runner_inspection import RunnerInspection
from controller.inference.step_path import StepPath
from controller.inference.tier_checks import (
    reference_at_start,
    repromote,
    start_tiers,
    tier_names,
)
from controller.inference.tier_report import TierReport
from controller.inference.tiers import EagerTier, Tier, build_tiers, half_tier_weights
from controller.observe.telemetry import Telemetry
from controller.runner_config import TIER_ORDER, RunnerConfig
from policies.base import PolicySpec, Prediction, RobotContext, window_context
from policies.tensor_policy import TensorPolicy

log = logging.getLogger(__name__)


class Runner(RunnerInspection):
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
        buckets of robots served in one step (inference.batch_sizes; 1 is always one), and
        batch_window_us how long its feed waits for more (inference.batch_window_us)."""
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
        self._counts = {"steps": 0, "failed_steps": 0, "reruns": 0, "input_faults": 0}
        self._last_error = ""
        self._seed = 0
        self._start_s: float | None = None
        # Where start() spent its time: "weights" (placing the model, half copy, compile
        # cache), "reference" (the FP32 reference pass), each tier, "the rest" (batch buckets,
        # cache save).
        self._start_phases: dict[str, float] = {}
        self._cache: CompileCache | None = None
        self._path: StepPath | None = None
        # The module the half-precision tiers run (its weights cast once, at start); the
        # profile's eager phase timing runs it too, as served. None before start.
        self.half_module: nn.Module | None = None
        self._batch_sizes = batch_sizes_for(policy, batch_sizes)
        self._buckets: dict[int, Bucket] = {}
        self._window_us = batch_window_us
        self.steps_by_bucket: Counter[int] = Counter()

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

    def _step(self, images: Mapping[str, np.ndarray], context: RobotContext) -> list[np.ndarray]:
        started = self._clock()
        with self._lock:
            ladder = self._ladder
            if ladder.current is None:
                raise PolicyError("the runner is not started: call start() before predict")
            if ladder.repromote_due():
                self._try_repromote_locked()
            path = self._path
            if path is None:  # unreachable once started; keeps the type checker honest
                raise PolicyError("the runner is not started: call start() before predict")
            with path.scope:  # one stream switch for upload, run and download
                outputs, name = self._serve(path, images, context, started)
            self._reports[name].served_steps += 1
            self._counts["steps"] += 1
            self.steps_by_bucket[1] += 1
            ladder.record_step(self._clock() - started)
            return outputs

    def _serve(
        self,
        path: StepPath,
        images: Mapping[str, np.ndarray],
        context: RobotContext,
        started: float,
    ) -> tuple[list[np.ndarray], str]:
        """Upload, then run on the serving tier, stepping down on trouble (see predict);
        returns the outputs and the tier that produced them."""
        ladder = self._ladder
        try:
            path.stage(images, context)
        except ValueError:
            raise
        except Exception as exc:
            raise PolicyError(f"uploading the observation failed: {first_line(exc)}") from exc
        while True:
            name = ladder.tiers[ladder.current or 0]
            try:
                outputs = path.run(self._tiers[name])
                if not all_finite(outputs):
                    raise NonFiniteOutput("the chunk has NaN or Inf values")
                return outputs, name
            except Exception as exc:
                if isinstance(exc, NonFiniteOutput) and self._reference_fails_too(path):
                    # The input is at fault, not the tier: refuse it, demote nothing.
                    self._counts["input_faults"] += 1
                    raise InputFault(
                        "the policy's FP32 reference also returns NaN or Inf for this "
                        "observation, so the observation was refused (no tier was demoted)"
                    ) from None
                self._counts["failed_steps"] += 1
                self._last_error = f"{name}: {first_line(exc)}"
                cause = "non_finite" if isinstance(exc, NonFiniteOutput) else "exception"
                to = ladder.demote(cause, first_line(exc))
                if to is None:
                    raise PolicyError(
                        f"tier {name} failed ({first_line(exc)}) and no lower tier is left; "
                        "this step has no chunk"
                    ) from exc
                budget = ladder.budget_s
                spent = self._clock() - started
                expected = self._reports[to].step_s or 0.0
                if budget is not None and spent + expected > budget:
                    raise PolicyError(
                        f"tier {name} failed ({first_line(exc)}); demoted to {to}, but this "
                        f"step was not re-run: {spent * 1e3:.1f} ms spent + "
                        f"{expected * 1e3:.1f} ms expected exceeds the {budget * 1e3:.1f} ms "
                        "budget"
                    ) from exc
                self._counts["reruns"] += 1

    def _reference_fails_too(self, path: StepPath) -> bool:
        """Run eager FP32 (the reference) on the observation still in the static inputs: does
        it fail as well? Then the observation, not the tier, is at fault."""
        try:
            return not all_finite(path.execute(self._reference))
        except Exception as exc:  # the reference cannot say: blame the tier, as before
            log.warning("fault attribution: the reference failed (%s)", first_line(exc))
            return False

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
            host_weights = self._config.reference_weights == "host"
            if host_weights:
                check_host_weights(self._policy.module, self._device)
            # The "weights" phase's parts, logged: where a big model's start goes.
            parts: list[tuple[str, float]] = [("", started)]

            def part(name: str) -> None:
                parts.append((name, time.perf_counter()))

            self._path = path = StepPath(
                self.spec, self._policy.module, self._device, self._config, self._codec
            )
            part("placing")
            names = tier_names(self._device, self._config, self._reports)
            config, device = self._config, self._device
            self._cache = open_compile_cache(names, self.spec, path.module, config, device)
            if self._cache is not None:
                say(f"compile cache: {self._cache.outcome} ({self._cache.file})")
            part("compile cache")
            exact: dict[int, torch.Tensor] | None = {} if host_weights else None
            half_module = self.half_module = half_tier_weights(
                names, path.module, config, device, exact
            )
            part("half copy")
            tiers = build_tiers(names, path.module, path.staging, config, half_module)
            part("tiers")
            if host_weights:  # after the half copy is made, which must not take the hooks along
                say(stream_host_weights(path.module, device, exact).describe())
                part("reference hooks")
            self._tiers = {
                name: FaultyTier(tier, self._faults[name]) if name in self._faults else tier
                for name, tier in tiers.items()
            }
            self._reference = EagerTier("eager_fp32", path.module, path.staging, None)
            observations = self._examples()
            part("examples")
            log.info(
                "weights phase: %s",
                ", ".join(
                    f"{name} {now - before:.2f} s"
                    for (_, before), (name, now) in zip(parts, parts[1:], strict=False)
                ),
            )
            phases = self._start_phases = {"weights": time.perf_counter() - started}
            reference = reference_at_start(path, self._reference, observations)
            phases["reference"] = time.perf_counter() - started - sum(phases.values())
            ready = start_tiers(
                path, self._tiers, self._reports, self._policy, self._config,
                observations, reference, say, phases,
            )  # fmt: skip
            self._buckets = start_buckets(
                path, self._batch_sizes, ready, path.module, half_module, config,
                self._policy, observations, reference.outputs, say,
            )  # fmt: skip
            if self._cache is not None and {"graph", "compiled"} & set(ready):
                self._cache.save()
            for bucket in [*self._buckets.values(), None]:
                for tier in (bucket.tiers if bucket else self._tiers).values():
                    tier.begin_serving()
            if self._telemetry is not None:
                for each in self._step_paths():
                    each.enable_telemetry(self._telemetry)
            self._ladder.begin(ready, {name: self._reports[name].step_s for name in ready})
            self._start_s = time.perf_counter() - started
            phases["the rest"] = self._start_s - sum(phases.values())
            say(
                f"policy started in {self._start_s:.1f} s: serving from {ready[0]} "
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

    def _next_seed(self) -> int:
        self._seed += 1
        return 1_000_003 * self._seed
