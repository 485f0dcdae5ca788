"""The path of one step on the device: upload -> tier -> download, on the runner's own stream.

It owns what every tier shares: the module (on the device, in eval mode, channels_last when
chosen), the static input tensors, the pinned output buffer and the compute stream.

The serving step enters `scope` once (no autograd, the compute stream current) and calls `stage`
and `run` inside it; `upload` and `execute` enter it themselves, for start-up and tools. At a
fraction of a millisecond per step, entering torch.no_grad() and torch.cuda.stream() twice a
step was a visible share of the host's time.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from controller.inference.device_timer import DeviceTimer
from controller.inference.host_weights import place_with_host_weights
from controller.inference.output_download import OutputDownload
from controller.inference.staging import InputStaging, Item
from controller.inference.tiers import Tier
from controller.observe.telemetry import (
    MODEL,
    MODEL_GPU,
    POSTPROCESS,
    UPLOAD,
    Telemetry,
)
from controller.runner_config import TIER_ORDER, RunnerConfig
from policies.base import PolicySpec, RobotContext
from policies.inputs import InputCodec
from policies.model_hooks import hooks_of


class StepPath:
    def __init__(
        self,
        spec: PolicySpec,
        module: torch.nn.Module,
        device: torch.device,
        config: RunnerConfig,
        codec: InputCodec | None = None,
        batch: int = 1,
    ) -> None:
        """Moves the module to `device` (in place, as nn.Module.to does) and allocates buffers
        for `batch` robots a step (see `for_batch` for a path of another size)."""
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("the runner was asked for CUDA, but torch sees no CUDA device")
        if config.reference_weights == "host":
            module = place_with_host_weights(module, device).eval()
        else:
            module = module.to(device).eval()
        has_conv = any(isinstance(m, torch.nn.Conv2d) for m in module.modules())
        self.channels_last = config.channels_last == "on" or (
            config.channels_last == "auto" and device.type == "cuda" and has_conv
        )
        if self.channels_last:
            # The policy knows its own layout (ACT also feeds the frames channels-last).
            module = hooks_of(module).use_channels_last()
        self.module = module
        self.device = device
        self.stream: torch.cuda.Stream | None = None
        if device.type == "cuda":
            torch.cuda.set_device(device)
            torch.backends.cudnn.benchmark = config.cudnn_benchmark
            self.stream = torch.cuda.Stream(device)
        self._spec, self._codec = spec, codec
        self._make_buffers(batch)
        self.timer = DeviceTimer(device)
        self._timed = False  # start-up steps (warm-up, parity) are not recorded

    def _make_buffers(self, batch: int) -> None:
        self.batch = batch
        spec = self._spec
        self.staging = InputStaging(
            spec, self.device, compute_stream=self.stream, codec=self._codec, batch=batch
        )
        shape = (spec.chunk_size, spec.action_dim)
        self._download = OutputDownload(shape, self.device, self.stream, batch=batch)
        self.scope = StepScope(self.stream)

    def for_batch(self, batch: int) -> StepPath:
        """A path for `batch` robots a step sharing this one's module, device, stream and
        timer (its own static inputs and output buffers): one per batch-size bucket."""
        other = copy.copy(self)
        other._make_buffers(batch)
        return other

    def enable_telemetry(self, telemetry: Telemetry) -> None:
        """Time every step from now on: upload, model (per tier; on CUDA also with CUDA events,
        resolved without synchronizing) and postprocess. Call from the serving thread's owner
        once start-up is over."""
        self._clock = telemetry.clock
        self._t_upload = telemetry.section(UPLOAD)
        self._t_post = telemetry.section(POSTPROCESS)
        self._t_model = {name: telemetry.section(MODEL, tier=name) for name in TIER_ORDER}
        events = self.timer.event_factory  # None off CUDA: the no-op timer
        self._gpu_model = {
            name: telemetry.gpu_timer(MODEL_GPU, event_factory=events, tier=name)
            for name in TIER_ORDER
        }
        self._timed = telemetry.enabled

    @property
    def download(self) -> OutputDownload:
        """The pinned output buffers a tier's outputs are fetched through into host arrays."""
        return self._download

    def on_stream(self) -> contextlib.AbstractContextManager[object]:
        if self.stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self.stream)

    def upload(self, images: Mapping[str, np.ndarray], context: RobotContext) -> None:
        with self.on_stream():
            self.stage(images, context)

    def stage(self, images: Mapping[str, np.ndarray], context: RobotContext) -> None:
        """`upload` inside `scope` (the serving step)."""
        if not self._timed:
            self.staging.stage(images, context)
            return
        started = self._clock()
        self.staging.stage(images, context)
        self._t_upload.stop(started)

    def execute(
        self,
        tier: Tier,
        images: Mapping[str, np.ndarray] | None = None,
        context: RobotContext | None = None,
    ) -> list[np.ndarray]:
        """(Upload,) run and download; returns new arrays that only the caller holds: the
        chunk, then the policy's extra outputs."""
        with torch.no_grad(), self.on_stream():
            if images is not None and context is not None:
                self.staging.stage(images, context)
            return self.run(tier)

    def run(self, tier: Tier) -> list[np.ndarray]:
        """`execute` without the upload, inside `scope` (the serving step)."""
        return self.run_rows(tier, 1)[0]

    def stage_rows(self, items: Sequence[Item]) -> list[ValueError | None]:
        """Several robots' observations into the batch rows (`InputStaging.stage_rows`),
        inside `scope`."""
        if not self._timed:
            return self.staging.stage_rows(items)
        started = self._clock()
        refused = self.staging.stage_rows(items)
        self._t_upload.stop(started)
        return refused

    def run_rows(self, tier: Tier, rows: int) -> list[list[np.ndarray]]:
        """`run` for the first `rows` batch rows: per row, its chunk then its extra outputs."""
        if not self._timed:
            return self._download.fetch_rows(tier.run(), rows)
        t = self._clock()
        gpu = self._gpu_model[tier.name]
        gpu.begin(self.stream)
        out = tier.run()
        gpu.end(self.stream)
        t = self._t_model[tier.name].lap(t)
        outputs = self._download.fetch_rows(out, rows)
        self._t_post.lap(t)
        return outputs

    def build(self, tier: Tier) -> None:
        with torch.no_grad(), self.on_stream():
            tier.build()

    def time_device(self, tier: Tier, iterations: int) -> list[float]:
        """Seconds per `run()` on the current static inputs: CUDA-event time on a GPU (the model
        alone, no upload or download), wall time on a CPU."""
        with torch.no_grad(), self.on_stream():
            return self.timer.time_each(tier.run, iterations)

    def describe(self) -> str:
        if self.device.type != "cuda":
            return str(self.device)
        return f"{self.device} ({torch.cuda.get_device_name(self.device)})"


class StepScope:
    """No autograd and the compute stream as the current stream, for one serving step: made
    once and re-entered each step (not re-entrant), with the stream switched by two calls
    instead of torch.cuda.stream()'s device look-ups and comparisons."""

    def __init__(self, stream: torch.cuda.Stream | None) -> None:
        self._stream = stream
        self._index = stream.device_index if stream is not None else None
        self._grad = False
        self._previous: torch.cuda.Stream | None = None

    def __enter__(self) -> None:
        self._grad = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        if self._stream is not None:
            self._previous = torch.cuda.current_stream(self._index)
            torch.cuda.set_stream(self._stream)

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            torch.cuda.set_stream(self._previous)
            self._previous = None
        torch.set_grad_enabled(self._grad)
