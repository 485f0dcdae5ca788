"""Real-time chunking on a GPU: one captured CUDA graph serves every inference delay, and the
runner serves every RTC mode from its tiers with parity against the FP32 reference."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.parity import relative_error  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.base import Plan, RobotContext  # noqa: E402
from policies.demo import make_demo_flow_policy  # noqa: E402
from policies.flow.rtc import serve_with_rtc  # noqa: E402
from policies.flow.settings import RTCConfig  # noqa: E402
from policies.inputs import example_frames  # noqa: E402
from policies.tensor_policy import EagerPolicy  # noqa: E402

pytestmark = pytest.mark.gpu

MODES = ("exact", "stop_grad", "inpaint")


def contexts(chunk: np.ndarray) -> list[RobotContext]:
    """Contexts with a previous plan (the given chunk, 5 steps in) and delays 0..4."""
    history = np.zeros((1, 6), np.float32)
    plan = Plan(start_step=105, actions=chunk[5:] + 0.05)
    return [
        RobotContext(105, False, history, previous_plan=plan, inference_delay=d) for d in range(5)
    ]


@pytest.mark.parametrize("mode", MODES)
def test_one_captured_graph_serves_every_delay(mode: str) -> None:
    """FP32 eager capture of the whole RTC step (the VJP included), replayed with d = 0..4 and
    new prefixes written into the same input buffers: equal to eager each time."""
    served = serve_with_rtc(make_demo_flow_policy(), RTCConfig(mode=mode))
    module = served.module.to("cuda").eval()
    codec = served.inputs
    frames = torch.from_numpy(example_frames(served.spec, 0)["front"]).cuda()[None, None]
    host = [np.zeros(i.shape, dtype=i.dtype) for i in codec.inputs]
    static = [frames] + [torch.from_numpy(h).cuda()[None].clone() for h in host]
    first = EagerPolicy(served, "cuda").predict(
        {"front": example_frames(served.spec, 0)["front"]}, codec.example(0)
    )
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            module(*static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = module(*static)
    for context in contexts(first.actions):
        codec.encode(context, host)
        for tensor, array in zip(static[1:], host, strict=True):
            tensor.copy_(torch.from_numpy(array)[None])
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            eager = module(*static)
        torch.testing.assert_close(out, eager, rtol=1e-4, atol=1e-4)
        d = context.inference_delay
        if d:  # the guidance did act: the first d actions moved toward the prefix
            prefix = torch.from_numpy(context.previous_plan.actions[:d]).cuda()  # type: ignore[union-attr]
            assert (out[0, :d] - prefix).abs().max() < 0.05


@pytest.mark.parametrize("mode", ("off", *MODES))
def test_the_runner_serves_each_mode_with_parity(mode: str, gpu_cache_dir) -> None:  # type: ignore[no-untyped-def]
    served = serve_with_rtc(make_demo_flow_policy(), RTCConfig(mode=mode))
    config = RunnerConfig(cache_dir=gpu_cache_dir, parity_observations=3, step_budget_ms=None)
    runner = Runner(served, config, device="cuda")
    runner.start()
    tiers = {t["name"]: t for t in runner.status()["tiers"]}  # type: ignore[union-attr]
    print(mode, {name: (t["state"], t["reason"], t["step_s"]) for name, t in tiers.items()})
    assert runner.tier == "graph", tiers["graph"]["reason"]
    reference = EagerPolicy(served, "cuda")  # FP32 under no_grad (see test_flow_rtc)
    images = {"front": example_frames(served.spec, 1)["front"]}
    first = runner.predict(images, served.inputs.example(1)).actions
    for context in contexts(first):
        chunk = runner.predict(images, context).actions
        assert relative_error(chunk, reference.predict(images, context).actions) <= 1e-2
    assert runner.demotions == []  # no recompile for any d, no non-finite chunk
