"""How smooth is execution across chunk boundaries: plain chunk switching, temporal ensembling,
and real-time chunking in each guidance mode, at inference delays d = 0..4 control steps.

A tiny policy on the CPU (`--family flow`, the default, or `pi0`: smoothness_models.py, beside it,
builds and trains both) drives a simulated position-controlled robot (its state is the last
commanded action). Every `--horizon` steps (the execution horizon s) an observation is taken at
step t; its chunk lands d steps later, tagged with step t, and goes into the robot's
ActionPipeline: `newest` execution for switching and RTC (the old chunk plays its first d actions,
then the new one; no averaging), `temporal` for ensembling. RTC gets the robot's plan from step t
on as its prefix and d as its delay, exactly as the daemon's session hands them over, through
the family's RTC codec and sampler (policies.flow.rtc, policies.pi0.rtc; `switching` and
`ensembling` run the sampler in mode off). beta and the overlap are the family's defaults
(flow: 5, the whole plan; pi0: 10, 10 rows) unless `--beta` says otherwise.

The policy is trained here for `--train-steps` steps (flow 400, pi0 3000 by default: a minute
or two of one core either way) on smooth chunks whose phase is
random (a multimodal task: two samples of the same observation disagree, which is what makes
chunks jump at boundaries); `--train-steps 0` keeps random weights (chunks are then mostly the
noise, rough inside as well as at boundaries).

Measured on the executed actions a_t (radians, all joints, after `--warmup` steps):
    jump       mean over boundaries of max_j |a_t - a_{t-1}|, t the first step of a new chunk
    inside     the same, over every other step (the chunk's own roughness, for scale)
    gap        mean over boundaries of max_j |new_t - old_t|: what the new chunk commands at its
               first executed step against what the old chunk had planned for that same step.
               The jump contains the motion the robot should make anyway (about `inside`), so
               its ratio to switching can never exceed jump(switching) / inside; the gap is the
               disagreement alone, zero for a perfect hand-over.
    jerk       peak of max_j |a_{t+1} - 3 a_t + 3 a_{t-1} - a_{t-2}| * rate^3, rad/s^3

`--jacobian` adds, for RTC exact at the largest delay, the Jacobian J = dA1/dA^t of the
predicted final chunk along the guided sampler's own path, averaged over its inferences: per
Euler step, the guidance weight, J's largest and median singular values, and the gain
||J^T W e|| / ||W e|| of the exact correction over stop_grad's (e = Y - A1). A gain below 1
means the paper's correction moves the chunk less than the weighted error does.

    python -m scripts.smoothness.rtc_smoothness [--family flow|pi0] [--train-steps N] [--steps 240]
        [--delays 0 1 2 3 4] [--jacobian]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from controller.action.guards_config import GuardsConfig
from controller.action.pipeline import ActionPipeline
from controller.action.teleop import TeleopConfig
from policies.base import RobotContext
from policies.flow.settings import RTCConfig
from scripts.smoothness.smoothness_models import (
    FAMILIES,
    JOINTS,
    TRAIN_STEPS,
    SmoothnessModel,
    make_model,
)

RATE_HZ = 50.0


def simulate(
    model: SmoothnessModel,
    method: str,
    delay: int,
    horizon: int,
    steps: int,
    rtc_config: RTCConfig,
    probes: list[tuple[torch.Tensor, ...]] | None = None,
    chunks: list[tuple[int, np.ndarray]] | None = None,
) -> tuple[np.ndarray, list[int], list[float]]:
    """Executed actions (steps, J), the steps where a new chunk took over and the gap there
    (max_j |new - old| at that step). `probes` collects the sampler's inputs of every
    inference, `chunks` every chunk as (its observation's step, actions (H, J))."""
    mode = method.removeprefix("rtc-") if method.startswith("rtc-") else "off"
    rtc = model.sampler(rtc_config.model_copy(update={"mode": mode}))
    ensemble = "temporal" if method == "ensembling" else "newest"
    pipeline = ActionPipeline(
        model.spec,
        GuardsConfig(),
        TeleopConfig(),
        RATE_HZ,
        ensemble=ensemble,  # type: ignore[arg-type]
    )
    position = model.rest
    landing: dict[int, tuple[int, np.ndarray]] = {}
    executed = np.zeros((steps, JOINTS))
    boundaries, gaps = [], []
    for t in range(steps):
        if t % horizon == 0:
            context = RobotContext(
                step=t,
                episode_start=t == 0,
                state_history=position[None, :].copy(),
                previous_plan=pipeline.plan(t),
                inference_delay=delay,
            )
            inputs = model.inputs(context)
            if probes is not None:
                probes.append(inputs)
            with torch.no_grad():
                out = rtc(*inputs)
            landing[t + delay] = (t, out[0].numpy())
            if chunks is not None:
                chunks.append(landing[t + delay])
        if t in landing:
            start, actions = landing.pop(t)
            old = pipeline.plan(t)
            pipeline.on_chunk(start, actions, t)
            boundaries.append(t)
            if old is not None and old.start_step == t:
                gaps.append(float(np.abs(actions[t - start] - old.actions[0]).max()))
            else:
                gaps.append(float("nan"))  # nothing planned for this step: no hand-over
        if pipeline.propose(t):
            position = pipeline.proposed.copy()
        elif boundaries:  # before the first chunk lands the robot holds still
            raise RuntimeError(f"no action for step {t}: horizon {horizon} too long for the chunk")
        executed[t] = position
    return executed, boundaries, gaps


def measure(
    executed: np.ndarray, boundaries: list[int], gaps: list[float], warmup: int
) -> tuple[float, float, float, float]:
    steps = np.abs(np.diff(executed, axis=0)).max(axis=1)  # steps[t - 1] = |a_t - a_{t-1}|
    at_boundary = np.zeros(len(executed), bool)
    at_boundary[[b for b in boundaries if b >= warmup]] = True
    jump = float(steps[at_boundary[1:]].mean())
    inside_mask = ~at_boundary[1:]
    inside_mask[: warmup - 1] = False
    inside = float(steps[inside_mask].mean())
    third = np.abs(np.diff(executed[warmup - 3 :], n=3, axis=0)).max(axis=1)
    gap = float(np.mean([g for b, g in zip(boundaries, gaps, strict=True) if b >= warmup]))
    return jump, gap, inside, float(third.max() * RATE_HZ**3)


def jacobian_profile(
    model: SmoothnessModel, rtc_config: RTCConfig, probes: list[tuple[torch.Tensor, ...]]
) -> None:
    """Per Euler step, averaged over `probes` (exact's own inferences): the guidance weight,
    the singular values of J = dA1/dA^t and the gain of the exact correction over the weighted
    error, along the exact sampler's path (pi0: over its padded action width)."""
    rtc = model.sampler(rtc_config.model_copy(update={"mode": "exact"}))
    n = rtc.n_steps
    rows = np.zeros((len(probes), n, 4))
    for p, inputs in enumerate(probes):
        with torch.no_grad():
            context, target, mask, noise = model.guidance(rtc, inputs)
        size = noise.numel()
        actions = noise
        for step in range(n):
            t = step / n

            def predicted_end(
                a: torch.Tensor, step: int = step, t: float = t, context: object = context
            ) -> torch.Tensor:
                return a + (1 - t) * rtc.velocity(a, step, context)

            with torch.no_grad():
                jac = torch.func.jacrev(predicted_end)(actions).reshape(size, size)
                error = (mask * (target - predicted_end(actions))).reshape(size)
                singular = torch.linalg.svdvals(jac)
                gain = (jac.T @ error).norm() / error.norm().clamp(min=1e-12)
                weight = rtc.step_weights[step]
                rows[p, step] = (weight, singular.max(), singular.median(), gain)
                actions = rtc.denoise(actions, step, context, target, mask, noise)
    print(f"RTC exact, J = dA1/dA^t along its path (mean of {len(probes)} inferences)")
    print(f"{'t':>5}{'weight':>8}{'sigma max':>11}{'sigma median':>14}{'gain':>8}")
    for step, (weight, top, median, gain) in enumerate(rows.mean(axis=0)):
        print(f"{step / n:>5.1f}{weight:>8.2f}{top:>11.3f}{median:>14.3f}{gain:>8.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--train-steps", type=int, default=None, help="default: 400 for flow, 3000 for pi0"
    )
    parser.add_argument("--chunk", type=int, default=20, help="H")
    parser.add_argument("--horizon", type=int, default=5, help="execution horizon s (>= max d)")
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--delays", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", default="flow", choices=list(FAMILIES))
    parser.add_argument(
        "--beta",
        type=float,
        default=None,
        help="RTC's guidance bound (default: the family's, 5 for flow, 10 for pi0)",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["switching", "ensembling", "rtc-exact", "rtc-stop_grad", "rtc-inpaint"],
        choices=["switching", "ensembling", "rtc-exact", "rtc-stop_grad", "rtc-inpaint"],
        help="switching first: it is the baseline of the last column",
    )
    parser.add_argument("--schedule", default="exp", choices=["exp", "linear", "ones", "zeros"])
    parser.add_argument(
        "--jacobian", action="store_true", help="RTC exact's Jacobian along its path (see above)"
    )
    args = parser.parse_args(argv)
    if max(args.delays) > args.horizon:
        parser.error("the execution horizon must be at least the largest delay (s >= d)")
    torch.set_num_threads(1)
    if args.train_steps is None:
        args.train_steps = TRAIN_STEPS[args.family]
    model = make_model(args.family, args.chunk, args.train_steps, args.seed)
    rtc_config = RTCConfig(beta=args.beta, schedule=args.schedule)
    defaults = model.sampler(rtc_config)
    methods = ["switching", *[m for m in args.methods if m != "switching"]]
    print(
        f"{args.family}: H {args.chunk}, s {args.horizon}, {args.steps} steps at "
        f"{RATE_HZ:.0f} Hz, "
        f"{'trained ' + str(args.train_steps) + ' steps' if args.train_steps else 'random weights'}"
        f", RTC beta {defaults.beta}, overlap {defaults.overlap_rows} rows, {args.schedule} mask"
    )
    print(
        f"{'method':<15}{'d':>3}{'jump rad':>11}{'gap rad':>10}{'inside rad':>12}"
        f"{'jerk rad/s^3':>14}{'jump vs switching':>19}{'gap vs switching':>18}"
        f"{'jump vs ensembling':>20}"
    )
    reductions: dict[str, list[float]] = {m: [] for m in methods}
    gap_reductions: dict[str, list[float]] = {m: [] for m in methods}
    # Against ensembling: the methods after it (switching runs first, as the baseline).
    after = methods[methods.index("ensembling") + 1 :] if "ensembling" in methods else []
    against_ensembling: dict[str, list[float]] = {m: [] for m in after}
    probes: list[tuple[torch.Tensor, ...]] = []
    for d in args.delays:
        baseline: tuple[float, float] | None = None
        ensembled = float("nan")
        for method in methods:
            probe = (
                probes
                if args.jacobian and method == "rtc-exact" and d == max(args.delays)
                else None
            )
            executed, boundaries, gaps = simulate(
                model, method, d, args.horizon, args.steps, rtc_config, probe
            )
            jump, gap, inside, jerk = measure(executed, boundaries, gaps, args.warmup)
            baseline = (jump, gap) if baseline is None else baseline
            ensembled = jump if method == "ensembling" else ensembled
            ratio = baseline[0] / jump if jump > 0 else float("inf")
            gap_ratio = baseline[1] / gap if gap > 0 else float("inf")
            ensemble_ratio = ensembled / jump if jump > 0 else float("inf")
            if d >= 2:
                reductions[method].append(ratio)
                gap_reductions[method].append(gap_ratio)
                if method in against_ensembling:
                    against_ensembling[method].append(ensemble_ratio)
            print(
                f"{method:<15}{d:>3}{jump:>11.4f}{gap:>10.4f}{inside:>12.4f}{jerk:>14.0f}"
                f"{ratio:>18.1f}x{gap_ratio:>17.1f}x"
                + (f"{ensemble_ratio:>19.1f}x" if method in against_ensembling else f"{'-':>20}")
            )
    if len(args.delays) and max(args.delays) >= 2:
        for method in methods[1:]:
            versus = (
                f"; the jump at least {min(against_ensembling[method]):.1f}x against "
                "temporal ensembling"
                if method in against_ensembling
                else ""
            )
            print(
                f"d = 2..4: {method} reduces the boundary jump at least "
                f"{min(reductions[method]):.1f}x and the gap at least "
                f"{min(gap_reductions[method]):.1f}x against plain switching{versus}"
                + (" (target: jump >= 5x)" if method == "rtc-exact" else "")
            )
    if probes:
        jacobian_profile(model, rtc_config, probes[len(probes) // 4 :])


if __name__ == "__main__":
    main()
