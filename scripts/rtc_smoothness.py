"""How smooth is execution across chunk boundaries: plain chunk switching, temporal ensembling,
and real-time chunking in each guidance mode, at inference delays d = 0..4 control steps.

A tiny flow policy on the CPU drives a simulated position-controlled robot (its state is the last
commanded action). Every `--horizon` steps (the execution horizon s) an observation is taken at
step t; its chunk lands d steps later, tagged with step t, and goes into the robot's
ActionPipeline: `newest` execution for switching and RTC (the old chunk plays its first d actions,
then the new one; no averaging), `temporal` for ensembling. RTC gets the robot's plan from step t
on as its prefix and d as its delay, exactly as the daemon's session hands them over.

The policy is trained here for `--train-steps` steps (seconds) on smooth chunks whose phase is
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

    python scripts/rtc_smoothness.py [--train-steps 400] [--steps 240] [--delays 0 1 2 3 4]
        [--jacobian]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from controller.action.guards_config import GuardsConfig
from controller.action.pipeline import ActionPipeline
from controller.action.teleop import TeleopConfig
from controller.policy_sections import RTCConfig
from policies.base import RobotContext
from policies.demo import make_demo_flow_policy
from policies.flow.codec import fill_noise, fill_prefix
from policies.flow.model import Context, FlowMatchingPolicy
from policies.flow.rtc import RealTimeChunking

RATE_HZ = 50.0
JOINTS = 2
AMPLITUDE = 1.0  # normalized units: the task's chunks are sinusoids of random phase


def make_policy(chunk: int, train_steps: int, seed: int) -> tuple[FlowMatchingPolicy, object]:
    policy = make_demo_flow_policy(
        cameras=(("front", 32, 32),),
        joint_names=tuple(f"j{i}" for i in range(JOINTS)),
        state_size=JOINTS,
        chunk_size=chunk,
        dim_model=32,
        seed=seed,
    )
    module = policy.module
    if not isinstance(module, FlowMatchingPolicy):
        raise TypeError("the demo flow policy's module is a FlowMatchingPolicy")
    if train_steps:
        train(module, train_steps, seed)
    return module.eval(), policy.spec


def task_chunks(state: torch.Tensor, chunk: int, gen: torch.Generator) -> torch.Tensor:
    """Normalized target chunks for normalized states (B, J): from the state, a half period of a
    sinusoid with a random phase per sample."""
    batch = state.shape[0]
    phase = torch.rand(batch, 1, 1, generator=gen) * 2 * math.pi
    i = torch.arange(chunk, dtype=torch.float32).view(1, -1, 1)
    offsets = torch.arange(JOINTS, dtype=torch.float32).view(1, 1, -1)
    wave = torch.sin(math.pi * i / chunk + phase + offsets) - torch.sin(phase + offsets)
    return state.unsqueeze(1) + AMPLITUDE * wave


def train(module: FlowMatchingPolicy, steps: int, seed: int, batch: int = 64) -> None:
    """Flow matching on the task: v(t A + (1 - t) e, t) regressed on A - e, t on the Euler grid."""
    gen = torch.Generator().manual_seed(seed)
    n, chunk = module.config.n_steps, module.config.chunk_size
    for p in module.backbone.parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=2e-3)
    images = torch.zeros(batch, 1, 32, 32, 3, dtype=torch.uint8)
    module.train()
    started = time.perf_counter()
    for _ in range(steps):
        state_n = torch.rand(batch, JOINTS, generator=gen) * 2 - 1
        target = task_chunks(state_n, chunk, gen)
        noise = torch.randn(target.shape, generator=gen)
        step = torch.randint(0, n, (batch,), generator=gen)
        t = (step.float() / n).view(-1, 1, 1)
        state = module.state_norm.unnormalize(state_n).unsqueeze(1)
        context = module.encode(images, state)
        v = module.velocity(t * target + (1 - t) * noise, step, context)
        loss = ((v - (target - noise)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"trained {steps} steps in {time.perf_counter() - started:.0f} s, loss {loss.item():.3f}")


def simulate(
    module: FlowMatchingPolicy,
    spec: object,
    method: str,
    delay: int,
    horizon: int,
    steps: int,
    seed: int,
    rtc_config: RTCConfig,
    probes: list[tuple[torch.Tensor, ...]] | None = None,
) -> tuple[np.ndarray, list[int], list[float]]:
    """Executed actions (steps, J), the steps where a new chunk took over and the gap there
    (max_j |new - old| at that step). `probes` collects the module inputs of every inference."""
    mode = method.removeprefix("rtc-") if method.startswith("rtc-") else "off"
    rtc = RealTimeChunking(module, rtc_config.model_copy(update={"mode": mode}))
    ensemble = "temporal" if method == "ensembling" else "newest"
    pipeline = ActionPipeline(
        spec,
        GuardsConfig(),
        TeleopConfig(),
        RATE_HZ,
        ensemble=ensemble,  # type: ignore[arg-type]
    )
    chunk = module.config.chunk_size
    image = torch.zeros(1, 1, 32, 32, 3, dtype=torch.uint8)
    noise = np.zeros((chunk, JOINTS), np.float32)
    prefix = np.zeros((chunk, JOINTS), np.float32)
    position = module.action_norm.mean.detach().numpy().astype(np.float32).copy()
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
            fill_noise(seed, t, noise)
            valid = fill_prefix(context, prefix)
            inputs = (
                image,
                torch.from_numpy(context.state_history[None]),
                torch.from_numpy(noise[None].copy()),
                torch.from_numpy(prefix[None].copy()),
                torch.tensor([valid]),
                torch.tensor([delay]),
            )
            if probes is not None:
                probes.append(inputs)
            with torch.no_grad():
                out = rtc(*inputs)
            landing[t + delay] = (t, out[0].numpy())
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
    module: FlowMatchingPolicy, rtc_config: RTCConfig, probes: list[tuple[torch.Tensor, ...]]
) -> None:
    """Per Euler step, averaged over `probes` (exact's own inferences): the guidance weight,
    the singular values of J = dA1/dA^t and the gain of the exact correction over the weighted
    error, along the exact sampler's path."""
    rtc = RealTimeChunking(module, rtc_config.model_copy(update={"mode": "exact"}))
    n, size = module.config.n_steps, module.config.chunk_size * JOINTS
    rows = np.zeros((len(probes), n, 4))
    for p, (image, state, noise, prefix, valid, delay) in enumerate(probes):
        with torch.no_grad():
            context = module.encode(image, state)
            target, mask = rtc.guidance_targets(prefix, valid, delay)
        actions = noise
        for step in range(n):
            t = module.times[step]

            def predicted_end(
                a: torch.Tensor, step: int = step, t: float = t, context: Context = context
            ) -> torch.Tensor:
                return a + (1 - t) * module.velocity(a, step, context)

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-steps", type=int, default=400)
    parser.add_argument("--chunk", type=int, default=20, help="H")
    parser.add_argument("--horizon", type=int, default=5, help="execution horizon s (>= max d)")
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--delays", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--beta", type=float, default=5.0, help="RTC's guidance bound")
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
    args = parser.parse_args()
    if max(args.delays) > args.horizon:
        parser.error("the execution horizon must be at least the largest delay (s >= d)")
    torch.set_num_threads(1)
    module, spec = make_policy(args.chunk, args.train_steps, args.seed)
    rtc_config = RTCConfig(beta=args.beta, schedule=args.schedule)
    methods = ["switching", *[m for m in args.methods if m != "switching"]]
    print(
        f"H {args.chunk}, s {args.horizon}, {args.steps} steps at {RATE_HZ:.0f} Hz, "
        f"{'trained ' + str(args.train_steps) + ' steps' if args.train_steps else 'random weights'}"
        f", RTC beta {args.beta}, {args.schedule} mask"
    )
    print(
        f"{'method':<15}{'d':>3}{'jump rad':>11}{'gap rad':>10}{'inside rad':>12}"
        f"{'jerk rad/s^3':>14}{'jump vs switching':>19}{'gap vs switching':>18}"
    )
    reductions: dict[str, list[float]] = {m: [] for m in methods}
    gap_reductions: dict[str, list[float]] = {m: [] for m in methods}
    probes: list[tuple[torch.Tensor, ...]] = []
    for d in args.delays:
        baseline: tuple[float, float] | None = None
        for method in methods:
            probe = (
                probes
                if args.jacobian and method == "rtc-exact" and d == max(args.delays)
                else None
            )
            executed, boundaries, gaps = simulate(
                module, spec, method, d, args.horizon, args.steps, args.seed, rtc_config, probe
            )
            jump, gap, inside, jerk = measure(executed, boundaries, gaps, args.warmup)
            baseline = (jump, gap) if baseline is None else baseline
            ratio = baseline[0] / jump if jump > 0 else float("inf")
            gap_ratio = baseline[1] / gap if gap > 0 else float("inf")
            if d >= 2:
                reductions[method].append(ratio)
                gap_reductions[method].append(gap_ratio)
            print(
                f"{method:<15}{d:>3}{jump:>11.4f}{gap:>10.4f}{inside:>12.4f}{jerk:>14.0f}"
                f"{ratio:>18.1f}x{gap_ratio:>17.1f}x"
            )
    if len(args.delays) and max(args.delays) >= 2:
        for method in methods[1:]:
            print(
                f"d = 2..4: {method} reduces the boundary jump at least "
                f"{min(reductions[method]):.1f}x and the gap at least "
                f"{min(gap_reductions[method]):.1f}x against plain switching"
                + (" (target: jump >= 5x)" if method == "rtc-exact" else "")
            )
    if probes:
        jacobian_profile(module, rtc_config, probes[len(probes) // 4 :])


if __name__ == "__main__":
    main()
