"""controller.inference.build: the device a runner gets, and the runner built and started."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from controller.errors import ConfigError, PolicyError  # noqa: E402
from controller.inference.build import build_runner, resolve_device  # noqa: E402
from controller.inference.examples import random_observation  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.base import window_context  # noqa: E402
from policies.tiny import build_tiny_policy  # noqa: E402

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def test_auto_and_cpu_resolve_to_a_concrete_device() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")


@no_cuda
def test_cuda_without_a_gpu_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as refused:
        resolve_device("cuda")
    assert str(refused.value) == (
        "policy.device is 'cuda' but PyTorch sees no CUDA GPU; install a CUDA build of PyTorch, "
        "check the driver, or set policy.device=cpu"
    )
    with pytest.raises(ConfigError, match=r"^--device is 'cuda' .* or set --device=cpu$"):
        resolve_device("cuda", setting="--device")


def test_build_runner_returns_a_started_runner_and_reports_progress() -> None:
    messages: list[str] = []
    config = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=1)
    policy = build_tiny_policy()
    runner = build_runner(policy, config, "cpu", progress=messages.append)
    assert runner.tier == "eager_fp32"
    assert any(message.startswith("policy started in") for message in messages)
    # What profiling tools read, through public accessors.
    assert runner.module is policy.module
    assert runner.serving_tier.name == runner.tier
    path = runner.step_path
    images, state = random_observation(runner.spec, 3)
    path.upload(images, window_context(state))
    with torch.no_grad():
        chunk = path.download.fetch(runner.serving_tier.run())[0]
    assert chunk.shape == (runner.spec.chunk_size, runner.spec.action_dim)


def test_profiling_accessors_refuse_before_start() -> None:
    runner = Runner(build_tiny_policy(), RunnerConfig(top_tier="eager_fp32"), device="cpu")
    with pytest.raises(PolicyError, match="not started"):
        runner.step_path  # noqa: B018
    with pytest.raises(PolicyError, match="not started"):
        runner.serving_tier  # noqa: B018


@pytest.mark.parametrize(("weights", "read_on"), [("host", "cpu"), ("device", "cuda")])
def test_a_checkpoint_is_read_where_its_reference_weights_stay(
    monkeypatch: pytest.MonkeyPatch, weights: str, read_on: str
) -> None:
    """With runner.reference_weights: host a checkpoint is read on the host: read onto the GPU,
    the whole FP32 model was uploaded only for the runner to copy its matmul weights back
    (a real-size pi0 on an H200: 9 s of the runner's 21 s start, 10.9 against 5.9 GB peak)."""
    import controller.inference.build as build
    from controller.policy_sections import PolicyConfig, RobotConfig

    read: list[str] = []
    started: list[str] = []

    def fake_read(policy: object, robot: object, *, device: str) -> str:
        read.append(device)
        return "the policy"

    monkeypatch.setattr(build, "resolve_device", lambda requested: "cuda")
    monkeypatch.setattr(build, "build_tensor_policy", fake_read)
    monkeypatch.setattr(
        build, "_start_runner", lambda policy, config, device, *rest: started.append(device)
    )
    section = PolicyConfig(kind="checkpoint", path="/nonexistent/ckpt", device="cuda")
    build.build_policy(section, RobotConfig(), RunnerConfig(reference_weights=weights))
    assert read == [read_on]
    assert started == ["cuda"]  # the runner still serves on the GPU


def test_a_familys_fallback_hook_is_what_build_policy_serves_beside_the_policy() -> None:
    """The fallback is the family's hook (TD-MPC2's policy prior is one): a family registered
    at run time with its own hook gets its fallback built and served under deadline pressure,
    and a hook that asks for nothing leaves the plain runner."""
    from controller.inference.build import build_policy
    from controller.inference.prior_fallback import PriorFallback
    from controller.policy_sections import PolicyConfig, RobotConfig
    from policies.registry import FallbackPolicy, PolicyFamily, register, unregister

    served, fallback = build_tiny_policy(), build_tiny_policy()
    asked: list[object] = []

    def hook(policy, settings):
        asked.append(policy)
        return FallbackPolicy(fallback, 0.25, 2, 5) if policy is served else None

    register(PolicyFamily(name="fallback-toy", title="Toy", summary="a toy", fallback=hook))
    try:
        config = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=1)
        section = PolicyConfig(device="cpu")
        built = build_policy(section, RobotConfig(), config, model=served)
        assert isinstance(built, PriorFallback)
        assert built.planner.module is served.module
        assert asked == [served]
        plain = build_policy(section, RobotConfig(), config, model=build_tiny_policy())
        assert isinstance(plain, Runner)
    finally:
        unregister("fallback-toy")


def test_the_inference_process_imports_no_family() -> None:
    """controller/inference builds and serves any family through the registry's hooks: no module
    of it imports a family's folder (policies.<family>) by name."""
    import ast
    from pathlib import Path

    import controller.inference
    from policies.registry import families

    folders = {f"policies.{family.name}" for family in families()} | {"policies.pi05"}
    found = []
    for path in Path(controller.inference.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [
                f"{path.name}: {name}"
                for name in names
                if any(name == f or name.startswith(f"{f}.") for f in folders)
            ]
    assert found == []
