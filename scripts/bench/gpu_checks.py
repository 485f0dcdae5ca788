"""GPU checks for ACT at ALOHA size (3 cameras 480x640, 14 joints, chunk 100), random weights:

1. FP32 on CUDA equals FP32 on the CPU (TF32 off) to 1e-4 relative error, on several inputs.
2. Eager FP32 step time on CUDA, input already on the GPU, the way LeRobot's temporal-ensembling
   `select_action` calls the model every step (LeRobot's eager FP32 `select_action` measured 13.1 ms
   median on an H200).
3. Optionally writes the policy as a Tempo checkpoint (`--save DIR`) for daemon runs.

    python -m scripts.bench.gpu_checks [--save DIR] [--iters 200]
"""

from __future__ import annotations

import argparse
import json

import torch

from controller.inference.device_timer import DeviceTimer
from controller.observe.percentiles import summarize
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_aloha_policy
from policies.tensor_policy import example_inputs
from scripts.measure import relative_error


def time_steps(module, images, state, iterations: int, warmup: int = 20) -> list[float]:  # type: ignore[no-untyped-def]
    """Milliseconds per forward, timed with CUDA events after `warmup` untimed calls."""
    timer = DeviceTimer(images.device)
    times = []
    for i in range(iterations + warmup):
        _, seconds = timer.time(lambda: module(images, state))
        if i >= warmup:
            times.append(seconds * 1e3)
    return times


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", help="write the policy as a Tempo checkpoint here")
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    policy = make_aloha_policy()
    if args.save:
        save_checkpoint(args.save, policy)
    torch.backends.cudnn.allow_tf32 = False  # a true FP32 comparison
    torch.backends.cuda.matmul.allow_tf32 = False
    cpu_module = policy.module
    gpu_module = make_aloha_policy().module.cuda()
    errors = []
    for seed in range(3):
        images, state = example_inputs(policy.spec, seed=seed)
        reference = cpu_module(images, state)
        on_gpu = gpu_module(images.cuda(), state.cuda()).cpu()
        errors.append(relative_error(on_gpu, reference))
    images, state = example_inputs(policy.spec, device="cuda", seed=7)
    times = time_steps(gpu_module, images, state, args.iters)
    torch.backends.cudnn.allow_tf32 = True  # the default a user runs with
    tf32 = time_steps(gpu_module, images, state, args.iters)
    fp32, tf32_convs = summarize(times), summarize(tf32)
    result = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "parameters_m": sum(p.numel() for p in cpu_module.parameters()) / 1e6,
        "cuda_vs_cpu_fp32_rel_error_max": max(errors),
        "eager_fp32_ms_median": fp32.p50,
        "eager_fp32_ms_p99": fp32.p99,
        "eager_fp32_tf32_convs_ms_median": tf32_convs.p50,
        "eager_fp32_tf32_convs_ms_p99": tf32_convs.p99,
    }
    print(json.dumps(result, indent=2))
    print("PASS" if max(errors) <= 1e-4 else "FAIL", "CUDA vs CPU FP32 parity (bound 1e-4)")


if __name__ == "__main__":
    main()
