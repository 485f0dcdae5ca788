"""The four ways the runner can execute one step, over the same static input tensors.

Every tier's `run()` reads `InputStaging.tensors`, enqueues the step on the current stream and
returns the outputs on the device, float32: the (1, chunk, action_dim) chunk first, then the
policy's extras (`policies.inputs`). The runner copies them out before the next `run()`, because
the graph tier returns the same graph-owned tensors each time.

Why the CUDA graph is captured by hand instead of torch.compile(mode="reduce-overhead"):
- We own the input buffers, so nothing is copied into graph-owned inputs each step (inductor's
  cudagraph trees copy every input that is not a parameter), and the graph's addresses are ours.
- The output copy is explicit; reduce-overhead hands back graph memory that the next replay
  overwrites, and it re-records silently on some guard changes; here a recompile is an error.
- A capture failure (a sync or a CPU tensor in forward) is a clean, logged failure of one tier,
  and the compiled tier below it still serves.
The kernels inside the graph are the same ones the compiled tier runs: one compile feeds both.

A module may define `precision_scope()`, a context manager for its reduced precision that is
process-wide state (TD-MPC2's TF32 matmuls): the reduced-precision tiers (those with a half
dtype: graph, compiled and eager_half on CUDA) enter it around compiling, warming up, capturing
and running; eager FP32, the reference, never does. torch.compile guards on such flags, so the
compiled tier always runs under the state it was compiled in. A module may also define
`compile_options()`, inductor settings its compiled code wants (TD-MPC2's planner asks for
`triton.multi_kernel`); they are part of the compile cache's key. A module that sets
`precast_half_weights` gets a copy with its matmul weights in the half type for the
reduced-precision tiers (`controller.inference.half_weights`); eager_fp32 keeps the original.
A module whose `compile_regions` compiles its repeated blocks (pi0: one compiled layer for 18
language-model layers, 180 expert layer calls and 27 vision layers) gets that instead of one
whole-step compile, on a copy sharing its weights, so eager_half stays uncompiled; the graph
tier captures the step with the compiled blocks inside, as it captures a whole compiled step.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

from controller.inference.built_artefacts import built_step
from controller.inference.compile_cache import load_deferred_megacaches
from controller.inference.half_weights import copy_sharing_tensors, half_tier_module
from controller.inference.host_weights import matmul_weights_on
from controller.inference.output_download import packed_outputs
from controller.inference.staging import InputStaging
from controller.runner_config import RunnerConfig, TierName
from policies.model_hooks import compiles_regions, hooks_of

Outputs = tuple[torch.Tensor, ...]

log = logging.getLogger(__name__)

# A compiled region (one function every layer of a kind calls) is one code object, and dynamo
# keeps one compiled entry per (call shape, tier, batch bucket) on it; its default limit of 8
# held pi0's joint layer for two buckets only, and with fullgraph the third bucket's compile
# failed. 64 covers the buckets 1-16 of a family with a few call shapes each. The setting is
# dynamo's, for the whole process (the inference process serves one policy), and stays raised:
# a bucket's first call after start would compile again too.
REGION_RECOMPILE_LIMIT = 64


def step_outputs(
    module: nn.Module, half: torch.dtype | None, device_type: str, inputs: tuple[torch.Tensor, ...]
) -> Outputs:
    """module(*inputs) under autocast (when `half` is set), always returning a tuple of FP32
    outputs (a module that returns one tensor gives a 1-tuple)."""
    if half is None:
        out = module(*inputs)
    else:
        with torch.autocast(device_type, dtype=half):
            out = module(*inputs)
    outputs = out if isinstance(out, tuple) else (out,)
    return tuple(o.float() for o in outputs)


class _Step(nn.Module):
    """`step_outputs` as a module, for torch.compile."""

    def __init__(self, module: nn.Module, half: torch.dtype | None, device_type: str) -> None:
        super().__init__()
        self.module = module
        self.autocast_dtype = half  # not `half`: that is nn.Module's own method
        self.device_type = device_type

    def forward(self, *inputs: torch.Tensor) -> Outputs:
        return step_outputs(self.module, self.autocast_dtype, self.device_type, inputs)


Scope = Callable[[], contextlib.AbstractContextManager[object]]


def compile_options(module: nn.Module) -> dict[str, object]:
    """Inductor settings the module asks for (its `compile_options()` hook)."""
    return dict(hooks_of(module).compile_options())


def precision_scope(module: nn.Module, half: torch.dtype | None) -> Scope:
    """The module's `precision_scope` for a reduced-precision tier, else a no-op."""
    if half is None:
        return contextlib.nullcontext
    return hooks_of(module).precision_scope


class Tier:
    """One rung of the ladder. `build` may take minutes (compile); `run` is the hot path."""

    name: TierName
    precision: str
    module: nn.Module  # what it runs: the half tiers' cast copy, or the module as loaded

    def build(self) -> None:
        """Compile, warm up, capture: everything before the parity check. Raises on failure."""

    def run(self) -> Outputs:
        raise NotImplementedError

    def begin_serving(self) -> None:
        """Start-up is over: from now on a recompile is an error."""


class EagerTier(Tier):
    def __init__(
        self, name: TierName, module: nn.Module, inputs: InputStaging, half: torch.dtype | None
    ) -> None:
        self.name = name
        self.precision = precision_name(half)
        self.module, self._half, self._device_type = module, half, inputs.device.type
        self._scope = precision_scope(module, half)
        self._inputs = inputs

    def run(self) -> Outputs:
        # Not through _Step: a module call of its own costs a few microseconds a step.
        with self._scope():
            return step_outputs(self.module, self._half, self._device_type, self._inputs.tensors)


class CompiledStep:
    """The torch.compile'd step shared by the graph and compiled tiers; compiled on first use."""

    def __init__(
        self,
        module: nn.Module,
        half: torch.dtype | None,
        inputs: InputStaging,
        config: RunnerConfig,
    ) -> None:
        self._inputs = inputs
        self._config = config
        self.module, self._half = module, half
        self._step = _Step(module, half, inputs.device.type)
        self._scope = precision_scope(module, half)
        self._module_options = compile_options(module)
        self.precision = precision_name(half)
        self.compiled: Callable[..., Outputs] | None = None
        self.compile_s: float | None = None
        self._error: BaseException | None = None

    def _compile(self) -> Callable[..., Outputs]:
        config = self._config
        built = built_step(self._step, self.module, self._half, self._inputs.tensors, config)
        if built is not None:  # `tempo build`'s artefacts: no tracing
            return built
        load_deferred_megacaches()
        options = None
        if config.compile_backend == "inductor":
            from torch._inductor import list_mode_options

            options = dict(list_mode_options(config.compile_mode))
            options["freezing"] = config.freezing
            options["triton.cudagraphs"] = False  # the graph tier captures its own graph
            options.update(self._module_options)
        compile_fn = functools.partial(
            torch.compile,
            backend=config.compile_backend,
            fullgraph=config.fullgraph,
            dynamic=False,
            options=options,
        )
        # Not with freezing: frozen weights become constants of the one compiled block that
        # every layer shares.
        # Nor with weights off the device (the FP32 reference's, host_weights): fusing them would
        # make host copies the compiled blocks cannot use.
        on_device = matmul_weights_on(self.module, self._inputs.device)
        if compiles_regions(self.module) and not config.freezing and on_device:
            regional = copy_sharing_tensors(self.module)
            dynamo = torch._dynamo.config
            dynamo.recompile_limit = max(dynamo.recompile_limit, REGION_RECOMPILE_LIMIT)
            if hooks_of(regional).compile_regions(compile_fn):
                log.info("compiling the model's repeated blocks, not the whole step")
                return _Step(regional, self._half, self._inputs.device.type)
        return compile_fn(self._step)  # type: ignore[no-any-return]

    def _tracing_settings(self) -> contextlib.AbstractContextManager[object]:
        """Settings dynamo must see while it traces. Freezing is one: dynamo makes the
        parameters constants only when inductor's global `freezing` is on as it traces; the
        same key in torch.compile's options reaches inductor alone, and nothing is frozen."""
        if self._config.compile_backend != "inductor" or not self._config.freezing:
            return contextlib.nullcontext()
        import torch._inductor.config as inductor_config

        return inductor_config.patch(freezing=True)  # type: ignore[no-any-return]

    def warm(self, steps: int) -> None:
        """Compile (first call) and run `steps` times on the current stream."""
        if self._error is not None:
            raise RuntimeError(f"torch.compile failed earlier: {self._error}") from self._error
        try:
            with self._scope():
                if self.compiled is None:
                    started = time.perf_counter()
                    self.compiled = self._compile()
                    with self._tracing_settings():
                        self.compiled(*self._inputs.tensors)  # traces and compiles
                    _sync(self._inputs.device)
                    self.compile_s = time.perf_counter() - started
                for _ in range(steps):
                    self.compiled(*self._inputs.tensors)
                _sync(self._inputs.device)
        except Exception as exc:
            self._error = exc
            raise

    def __call__(self) -> Outputs:
        if self.compiled is None:
            raise RuntimeError("the compiled step was used before it was built")
        with self._scope():  # the graph tier captures under it too
            return self.compiled(*self._inputs.tensors)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def no_recompile() -> contextlib.AbstractContextManager[object]:
    """torch.compile's stance is process-wide, so it is set only around our own compiled calls;
    eager tiers and the eager reference never enter torch.compile and are unaffected. Without
    torch's compiler imported nothing was compiled (a start from built artefacts): no stance,
    whose setting would import the compiler (seconds, in the first served step)."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("fail_on_recompile")  # type: ignore[return-value]


class CompiledTier(Tier):
    name: TierName = "compiled"

    def __init__(self, step: CompiledStep, warmup_steps: int) -> None:
        self._step = step
        self._warmup = warmup_steps
        self._serving = False
        self.precision = step.precision
        self.module = step.module

    def build(self) -> None:
        self._step.warm(self._warmup)

    def run(self) -> Outputs:
        if not self._serving:
            return self._step()
        with no_recompile():
            return self._step()

    def begin_serving(self) -> None:
        self._serving = True


class GraphTier(Tier):
    """One CUDA graph of the compiled step, replayed over the static input tensors. A step with
    extra outputs ends, inside the graph, with one copy of them all into one buffer
    (`PackedOutputs`): a device copy of a few kilobytes is cheaper than a second download."""

    name: TierName = "graph"

    def __init__(self, step: CompiledStep, inputs: InputStaging, warmup_steps: int) -> None:
        if inputs.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self._step = step
        self._inputs = inputs
        self._warmup = warmup_steps
        self.precision = step.precision
        self.module = step.module
        self._graph: torch.cuda.CUDAGraph | None = None
        self._out: Outputs | None = None

    def build(self) -> None:
        side = torch.cuda.Stream(self._inputs.device)
        side.wait_stream(torch.cuda.current_stream(self._inputs.device))
        # Warm up on the capture stream: lazy initialisations (cuBLAS workspaces, cuDNN plans,
        # autotuning) must happen before capture, where they are not allowed.
        with torch.cuda.stream(side):
            self._step.warm(self._warmup)
        torch.cuda.synchronize(self._inputs.device)
        graph = torch.cuda.CUDAGraph()
        # thread_local: CUDA calls from other threads of the daemon cannot break the capture.
        capture = torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local")
        with no_recompile(), capture:
            out = self._step()
            if len(out) > 1:  # one buffer, so the download is one copy instead of one each
                out = packed_outputs(torch.cat([o.reshape(-1) for o in out]), out)
        self._graph, self._out = graph, out
        graph.replay()
        torch.cuda.synchronize(self._inputs.device)

    def run(self) -> Outputs:
        if self._graph is None or self._out is None:
            raise RuntimeError("the CUDA graph was used before it was captured")
        self._graph.replay()
        return self._out


_HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def precision_name(half: torch.dtype | None) -> str:
    return {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(half, "fp32")  # type: ignore[arg-type]


def precision_dtype(precision: str) -> torch.dtype | None:
    """The half type a precision name stands for ("fp16", "bf16"); None for "fp32"."""
    return _HALF_DTYPES.get(precision)


def half_dtype(config: RunnerConfig) -> torch.dtype:
    return _HALF_DTYPES[config.precision]


def half_tier_weights(
    names: list[TierName],
    module: nn.Module,
    config: RunnerConfig,
    device: torch.device,
    exact: dict[int, torch.Tensor] | None = None,
) -> nn.Module:
    """The module the reduced-precision tiers among `names` run on `device`: a copy whose
    weights are already in the half type where that works (controller.inference.half_weights),
    else `module` itself. Made once and shared by every batch-size bucket's tiers. `exact`:
    as half_weight_copy's (the weights the cast left unchanged)."""
    half = half_dtype(config) if device.type == "cuda" else None
    if all(name == "eager_fp32" for name in names):
        return module
    try:
        # FP32 weights kept on the host (runner.reference_weights): cast straight to the device.
        target = device if config.reference_weights == "host" else None
        # Filled only when the copy is whole: a failed one leaves no tensors to the reference.
        found: dict[int, torch.Tensor] = {}
        copy = half_tier_module(module, half, target, None if exact is None else found)
        if exact is not None:
            exact.update(found)
        return copy
    except Exception as exc:  # noqa: BLE001 - out of GPU memory, say: autocast still works
        log.warning(
            "could not hold the weights in half precision (%s); the half-precision tiers "
            "cast them on every step instead",
            exc,
        )
        return module


def build_tiers(
    names: list[TierName],
    module: nn.Module,
    inputs: InputStaging,
    config: RunnerConfig,
    half_module: nn.Module | None = None,
) -> dict[TierName, Tier]:
    """Tier objects for `names` over `inputs` (nothing is compiled until `build`). The FP32
    reference (eager_fp32) runs `module`; the half tiers run `half_module` (default: made here
    by `half_tier_weights`)."""
    cuda = inputs.device.type == "cuda"
    half = half_dtype(config) if cuda else None
    if half_module is None:
        half_module = half_tier_weights(names, module, config, inputs.device)
    step = CompiledStep(half_module, half, inputs, config)
    tiers: dict[TierName, Tier] = {}
    for name in names:
        if name == "graph":
            tiers[name] = GraphTier(step, inputs, config.warmup_steps)
        elif name == "compiled":
            tiers[name] = CompiledTier(step, config.warmup_steps)
        elif name == "eager_half":
            tiers[name] = EagerTier(name, half_module, inputs, half_dtype(config))
        else:
            tiers[name] = EagerTier(name, module, inputs, None)
    return tiers
