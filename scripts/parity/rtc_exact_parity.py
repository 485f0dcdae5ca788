"""RTC `exact` served from the runner's top tier (the CUDA graph of the compiled step, VJP
inside) against eager FP32 (no_grad) over many robot contexts; the check behind lifting the
eager-only refusal of exact mode.

Contexts, each with its own frames and state:
- served: a closed loop as a robot's session runs it: the plan is the runner's own previous
  chunk, 1..5 steps executed since it began (so prefixes of H - 5 .. H - 1 rows), delay 0..4;
- random: the codec's random examples (random plans in robot units, delays up to H / 2).
Printed per kind: the largest and median relative error ||tier - fp32|| / ||fp32||, and how far
the guidance moved the chunk (the same error of the unguided chunk): an error near that figure
means one side lost its guidance. Also printed: whether this torch's torch.func.vjp returns
zeros under torch.inference_mode (pytorch#177318, fixed 2026-03): the suspected cause of the 0.88
that the eager reference (then under inference mode) showed on an H100.

    python -m scripts.parity.rtc_exact_parity [--policy demo|aloha] [--tier graph] [-n 100]

Exit status 0 when every error is within the runner's parity_rtol.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.base import Plan, RobotContext
from policies.demo import make_demo_flow_policy, make_flow_aloha_policy
from policies.flow.rtc import serve_with_rtc
from policies.flow.settings import RTCConfig
from policies.inputs import example_frames
from policies.tensor_policy import EagerPolicy
from scripts.measure import relative_error


def vjp_zero_under_inference_mode() -> bool:
    """Whether this torch has pytorch#177318: d(x^2) = 2x comes back as zeros."""
    x = torch.arange(1.0, 4.0)
    with torch.inference_mode():
        pullback = torch.func.vjp(lambda a: a * a, x)[1]  # (output, pullback)
        (grad,) = pullback(torch.ones(3))
    return bool((grad == 0).all())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--policy", choices=("demo", "aloha"), default="demo")
    parser.add_argument("--tier", default="graph", help="runner.top_tier")
    parser.add_argument("--precision", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("-n", "--contexts", type=int, default=100, help="per kind")
    args = parser.parse_args(argv)
    print(
        f"torch {torch.__version__}: torch.func.vjp under inference_mode returns zeros: "
        f"{vjp_zero_under_inference_mode()}"
    )
    base = make_flow_aloha_policy() if args.policy == "aloha" else make_demo_flow_policy()
    served = serve_with_rtc(base, RTCConfig(mode="exact"))  # exact always unrolls its steps
    config = RunnerConfig(
        top_tier=args.tier, precision=args.precision, step_budget_ms=None, serve_slower_tiers=True
    )
    runner = Runner(served, config, device=args.device)
    runner.start(progress=lambda line: print(line, file=sys.stderr))
    print(f"serving from {runner.tier} ({runner.status()['device']})")
    reference = EagerPolicy(served, args.device)  # shares the module: FP32, no_grad
    unguided = EagerPolicy(serve_with_rtc(base, RTCConfig(mode="off")), args.device)
    spec, codec = served.spec, served.inputs
    rng = np.random.default_rng(0)
    errors: dict[str, list[float]] = {"served": [], "random": []}
    moved: dict[str, list[float]] = {"served": [], "random": []}
    failures: list[str] = []

    def check(
        kind: str, index: int, images: dict[str, np.ndarray], ctx: RobotContext
    ) -> np.ndarray:
        chunk = runner.predict(images, ctx).actions
        expected = reference.predict(images, ctx).actions
        error = relative_error(chunk, expected)
        errors[kind].append(error)
        moved[kind].append(relative_error(unguided.predict(images, ctx).actions, expected))
        if not error <= config.parity_rtol:
            failures.append(
                f"{kind} {index}: error {error:.2e} (d={ctx.inference_delay}, "
                f"prefix from step {ctx.previous_plan.start_step if ctx.previous_plan else None}"
                f" at step {ctx.step})"
            )
        return chunk

    step = 100
    state = np.zeros((spec.state_history, spec.state_size), np.float32)
    chunk = runner.predict(example_frames(spec, 0), RobotContext(step, True, state)).actions
    for i in range(args.contexts):
        executed = int(rng.integers(1, 6))
        plan = Plan(start_step=step, actions=chunk)
        step += executed
        state = rng.standard_normal(state.shape).astype(np.float32)
        ctx = RobotContext(step, False, state, plan, int(rng.integers(0, 5)))
        images = example_frames(spec, 1000 + i)
        chunk = check("served", i, images, ctx)  # the loop goes on from the served chunk
    for i in range(args.contexts):
        check("random", i, example_frames(spec, 2000 + i), codec.example(2000 + i))
    for kind in errors:
        e, m = np.asarray(errors[kind]), np.asarray(moved[kind])
        print(
            f"{kind:<7} {len(e)} contexts: tier vs fp32 max {e.max():.2e} median "
            f"{np.median(e):.2e} | guidance moved the chunk by median {np.median(m):.2f}"
        )
    print(f"demotions: {runner.demotions}")
    for line in failures[:10]:
        print("  " + line)
    verdict = "PASS" if not failures and not runner.demotions else "FAIL"
    print(f"{verdict} exact on {runner.tier} within parity_rtol {config.parity_rtol:.0e}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
