"""`tempo profile`: where one policy step's time goes, measured several ways, and what to do.

    result = run_profile(config, iterations=200)        # builds and starts the runner as serve does
    print(render_profile(result))

No robot is needed: observations are synthesised from the policy's spec, or replayed from an
.npz file (`controller.tools.replay`). After `warmup` steps, every iteration measures,
interleaved so that machine drift affects every row alike:

    policy step      runner.predict_chunk, the step a served `predict` runs: wall
                     clock, nothing added (no synchronize), the number every other row is a
                     share of
    upload           StepPath.upload (host copy into the staging, copy to the device); on CUDA
                     followed by a synchronize, so the row includes the transfer
    model            the serving tier's run() alone: CUDA events on CUDA, wall clock on a CPU
    download         fetching the chunk into a host array, and the finite check
    runner (rest)    derived: policy step - (upload + model + download), means only (the phases
                     come from a separate, synchronized call, so per-sample differences are noise)
    ensembler        ActionPipeline.on_chunk (every query_period steps) + propose, per control
                     step, wall clock
    guards           ActionPipeline.check (teleop mix + guard chain), per control step, wall
                     clock

Then, in a separate pass (hooks must never be on a module a compiled tier calls), the eager
module is timed per top-level submodule with forward hooks (`controller.tools.module_timing`), in
the serving tier's precision (on a copy with the weights held as the half tiers hold them, see
`controller.inference.half_weights`), plus the part of forward outside any submodule.
Percentages are of means (means add up; medians do not): phases as a share of the policy step,
submodules of the eager forward, tick rows of the control period.

`--torch-profiler DIR` afterwards records a few steps with torch.profiler into a trace that
Perfetto (ui.perfetto.dev) and TensorBoard's profiler plugin open.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from controller.action.guards import Verdict
from controller.action.pipeline import ActionPipeline
from controller.config import TempoConfig
from controller.daemon.execution import resolve_execution
from controller.daemon.service import pipeline_factory
from controller.inference import build
from controller.inference.device_timer import DeviceTimer
from controller.inference.half_weights import half_tier_module
from controller.inference.runner import Runner
from controller.inference.step_path import StepPath
from controller.inference.tiers import Tier, precision_dtype
from controller.tools.flow_phases import phase_rows, phase_summary
from controller.tools.module_timing import FORWARD, SubmoduleTimer
from controller.tools.phase_timing import family_phase_rows
from controller.tools.profile_result import ProfileResult, Row
from controller.tools.profile_view import recommend, render_profile
from controller.tools.replay import ObservationSource
from controller.tools.reports import write_profile_report
from controller.tools.torch_trace import torch_trace
from policies.base import PolicySpec, window_context
from policies.catalog import describe_source, profile_phases
from policies.tensor_policy import TensorPolicy

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

__all__ = [
    "robot_pipeline",
    "timed_control_step",
    "ProfileResult",
    "Row",
    "observation_source",
    "recommend",
    "render_profile",
    "run_profile",
    "profiled_runner",
]


# -- building what the daemon builds ---------------------------------------------------------------


def describe_policy(config: TempoConfig, module: torch.nn.Module, injected: bool) -> str:
    params = sum(p.numel() for p in module.parameters())
    name = type(module).__name__
    source = "given in code" if injected else describe_source(config.policy)
    return f"{name}, {params / 1e6:.2f} M parameters ({source})"


def profiled_runner(
    config: TempoConfig, policy: TensorPolicy | None = None, progress: Progress | None = None
) -> tuple[Runner, str]:
    """The policy built exactly as `tempo serve` builds it (controller.inference.build, the
    prior fallback included), and the Runner of its configured model, which is what is
    profiled; and a description of the policy. `policy` replaces the configured model (tests,
    scripts)."""
    served = build.build_policy(config.policy, config.robot, config.runner, progress, policy)
    runner = build.planner_runner(served)
    description = describe_policy(config, runner.module, policy is not None)
    if runner is not served:
        description += "; a policy-prior fallback is built beside it, not profiled"
    return runner, description


def observation_source(runner: Runner, replay: Path | None, seed: int = 0) -> ObservationSource:
    if replay is not None:
        return ObservationSource.from_npz(replay, runner.spec)
    return ObservationSource.synthetic(runner.spec, seed=seed)


def robot_pipeline(config: TempoConfig, spec: PolicySpec) -> ActionPipeline:
    """The action pipeline the daemon would give a robot under `config` (no driver limits)."""
    return pipeline_factory(spec, config)({})


def timed_control_step(
    pipeline: ActionPipeline, step: int, chunk: np.ndarray | None, state: np.ndarray
) -> tuple[int, int]:
    """One control step of one robot as the daemon's loop runs it, with a fresh observation
    (`state`, its newest joint state) and the chunk predicted for this step, if any. Returns
    (ensembler ns, teleop + guards ns)."""
    clock = time.perf_counter_ns
    pipeline.on_observation(state, None, time.monotonic_ns())
    t0 = clock()
    if chunk is not None:
        pipeline.on_chunk(step, chunk, step)
    pipeline.propose(step)
    t1 = clock()
    verdict = pipeline.check(time.monotonic_ns())
    if verdict is Verdict.ACTION:
        pipeline.delivered()
    t2 = clock()
    return t1 - t0, t2 - t1


class _Phases:
    """Upload, model and download of one step, each timed on its own (see the module doc),
    through the runner's step path, as scripts/bench/profile_step.py does."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.path: StepPath = runner.step_path
        self.cuda = self.path.device.type == "cuda"
        self.timer = DeviceTimer(self.path.device)

    def tier(self) -> Tier:
        return self.runner.serving_tier

    def run(self, images: dict[str, np.ndarray], state: np.ndarray) -> tuple[float, float, float]:
        path, clock = self.path, time.perf_counter
        started = clock()
        context = window_context(state)
        if self.runner.spec.prompt is not None:  # pi0: the codec's example prompt, as predict_chunk
            context = dataclasses.replace(context, prompt=self.runner.codec.example(0).prompt)
        path.upload(images, context)
        if self.cuda:
            torch.cuda.synchronize(path.device)
        uploaded = clock()
        with torch.no_grad(), path.on_stream():
            out, model = self.timer.time(self.tier().run)
            fetched = clock()
            chunk = path.download.fetch(out)[0]
            bool(np.isfinite(chunk).all())
            download = clock() - fetched
        return uploaded - started, model, download


def _breakdown(
    runner: Runner, precision: str, source: ObservationSource, iterations: int
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Per-child seconds of the eager forward (hooks), FORWARD, and the children never called."""
    path = runner.step_path
    half = precision_dtype(precision) if path.device.type == "cuda" else None
    # A copy, or hooks would be on the served module.
    module = half_tier_module(path.module, half, path.device)
    times: dict[str, list[float]] = {}
    # On the runner's stream, so the hooks' CUDA events and the forward share one stream.
    with SubmoduleTimer(module, path.device) as timer, torch.no_grad(), path.on_stream():

        def forward() -> Any:
            if half is None:
                return module(*path.staging.tensors)
            with torch.autocast(path.device.type, dtype=half):
                return module(*path.staging.tensors)

        for i in range(iterations + 3):
            images, state = source.next()
            path.upload(images, window_context(state))
            measured = timer.measure(forward)
            if i < 3:
                continue  # the hooks' own first calls
            for name, seconds in measured.items():
                times.setdefault(name, []).append(seconds)
        uncalled = [name for name, _ in timer.children if name not in timer.called]
    n = iterations
    out = {name: np.asarray(values + [0.0] * (n - len(values))) for name, values in times.items()}
    return out, uncalled


# -- the profile -----------------------------------------------------------------------------------


def run_profile(
    config: TempoConfig,
    iterations: int = 200,
    replay: Path | None = None,
    torch_profiler_dir: Path | None = None,
    report_dir: Path | None = None,
    *,
    warmup: int = 20,
    policy: TensorPolicy | None = None,
    progress: Progress | None = None,
    torch_profiler_steps: int = 10,
) -> ProfileResult:
    """Build the policy as the daemon does, measure `iterations` steps after `warmup`, and
    return the breakdown with recommendations. `report_dir`: also write JSON and plots there
    (`controller.tools.reports`); the paths are logged and listed by the CLI."""
    if iterations < 2:
        raise ValueError("profile at least 2 iterations")
    say = progress or (lambda message: log.info("%s", message))
    runner, description = profiled_runner(config, policy, say)
    source = observation_source(runner, replay)
    status = runner.status()
    reports = {t["name"]: t for t in status["tiers"]}  # type: ignore[attr-defined]
    serving = runner.tier or "?"
    precision = str((reports.get(serving) or {}).get("precision", "fp32"))
    demotions_before = len(runner.demotions)
    say(f"profiling {serving}: {warmup} warm-up steps, then {iterations} measured")
    for _ in range(warmup):
        runner.predict_chunk(*source.next())

    phases = _Phases(runner)
    pipeline = robot_pipeline(config, runner.spec)
    period = resolve_execution(config.execution, runner.spec)[0].query_period
    clock = time.perf_counter_ns
    columns = {k: np.zeros(iterations) for k in ("step", "upload", "model", "download")}
    columns |= {"ensembler": np.zeros(iterations), "guards": np.zeros(iterations)}
    for i in range(iterations):
        images, state = source.next()
        began = clock()
        chunk = runner.predict_chunk(images, state)
        columns["step"][i] = (clock() - began) / 1e9
        up, model, down = phases.run(images, state)
        columns["upload"][i], columns["model"][i], columns["download"][i] = up, model, down
        due = chunk if i % period == 0 else None
        ens, guards = timed_control_step(pipeline, i, due, state[-1])
        columns["ensembler"][i], columns["guards"][i] = ens / 1e9, guards / 1e9
    flow = phase_summary(runner.step_path.module)
    family_phases = profile_phases(runner.step_path.module)
    if flow is None and family_phases is None:
        say("timing the eager forward per submodule (forward hooks)")
        children, uncalled = _breakdown(runner, precision, source, iterations)
    else:  # a flow or pi0 policy's time is in its phases (encode once, n steps, guidance);
        # another's in the phases its family names (policies.registry.ProfilePhases)
        say("timing the policy's phases (eager)")
        children, uncalled = {}, []

    cuda = phases.cuda
    model_how = "CUDA events, synchronize after" if cuda else "wall clock (CPU is synchronous)"
    hook_how = "forward hooks, CUDA events" if cuda else "forward hooks, wall clock"
    rest = columns["step"] - columns["upload"] - columns["model"] - columns["download"]
    rows = [
        Row(
            "step",
            "policy step (predict_chunk)",
            "step",
            columns["step"],
            "wall clock, as served",
            "step",
        ),
        Row(
            "upload",
            "upload (staging)",
            "step",
            columns["upload"],
            "wall clock, synchronize after" if cuda else "wall clock",
            "step",
        ),
        Row(
            "model",
            f"model (tier {serving}, {precision})",
            "step",
            columns["model"],
            model_how,
            "step",
        ),
        Row(
            "download", "download + finite check", "step", columns["download"], "wall clock", "step"
        ),
        Row(
            "rest",
            "runner bookkeeping (rest)",
            "step",
            rest,
            "derived: step - phases (means)",
            "step",
            derived=True,
        ),
    ]
    forward = children.pop(FORWARD, None)
    if children and forward is not None:
        for name in sorted(children, key=lambda n: -children[n].mean()):
            rows.append(Row(f"sub:{name}", name, "model", children[name], hook_how, "forward"))
        outside = forward - sum(children.values())
        rows.append(
            Row(
                "outside",
                "outside submodules (preprocess, glue)",
                "model",
                outside,
                "derived: forward - submodules",
                "forward",
            )
        )
    if forward is not None:
        rows.append(
            Row(
                "forward",
                f"eager forward, total ({precision})",
                "model",
                forward,
                "CUDA events" if cuda else "wall clock",
                "forward",
            )
        )
    if flow is not None:
        rows += phase_rows(runner, precision, iterations)
    if family_phases is not None:
        rows += family_phase_rows(runner, precision, iterations, family_phases)
    rows += [
        Row(
            "ensembler",
            "ensembler (add_chunk + action_at)",
            "tick",
            columns["ensembler"],
            "wall clock",
            "period",
        ),
        Row(
            "guards",
            "teleop + guards (ActionPipeline.check)",
            "tick",
            columns["guards"],
            "wall clock",
            "period",
        ),
    ]
    spec = runner.spec
    frame_bytes = sum(c.height * c.width * 3 for c in spec.cameras)
    result = ProfileResult(
        policy=description,
        device=str(status.get("device")),
        tier=serving,
        precision=precision,
        channels_last=status.get("channels_last"),  # type: ignore[arg-type]
        top_tier_setting=config.runner.top_tier,
        step_budget_ms=config.runner.step_budget_ms,
        iterations=iterations,
        warmup=warmup,
        source=source.description,
        control_hz=config.control.rate_hz,
        query_period=period,
        n_cameras=len(spec.cameras),
        frame_bytes=frame_bytes,
        rows=rows,
        tiers=list(runner.status()["tiers"]),  # type: ignore[call-overload]
        demotions=[d.as_dict() for d in runner.demotions[demotions_before:]],
        uncalled_children=uncalled,
        flow=flow,
    )
    if runner.tier != serving:
        result.tier = f"{serving} (demoted to {runner.tier} during the profile)"
    result.recommendations = recommend(result)
    if torch_profiler_dir is not None:
        say(f"recording a torch.profiler trace into {torch_profiler_dir}")
        result.torch_trace = torch_trace(
            runner, source, Path(torch_profiler_dir), torch_profiler_steps
        )
    if report_dir is not None:
        result.report = write_profile_report(result, Path(report_dir))
    return result
