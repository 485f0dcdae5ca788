"""Regional compiling (policies.model_hooks.compile_regions): the compiled tiers let a module
compile its repeated blocks on a copy sharing its weights, the eager tiers keep the original
uncompiled, and pi0's step routes every vision layer and every joint layer through the one
compiled function it is given. CPU, tiny widths, torch.compile's "eager" backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from controller.inference.tiers import CompiledStep
from controller.runner_config import RunnerConfig
from policies.model_hooks import ServedModule, compiles_regions
from policies.pi0.config import tiny_pi0_config
from policies.pi0.fused_projections import fuse_linears, split_sizes
from policies.pi0.gemma import GemmaAttention
from policies.pi0.joint_attention import joint_layer
from policies.pi0.siglip import run_encoder_layer
from policies.pi0.step import Pi0Step, Pi0StepConfig


class _Blocks(ServedModule):
    """Two identical blocks behind one replaceable call."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.block_call: Callable[[nn.Module, Tensor], Tensor] = _run

    def compile_regions(self, compile_fn: Callable[[Callable[..., Any]], Any]) -> bool:
        self.block_call = compile_fn(_run)
        return True

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = self.block_call(block, x)
        return x


def _run(block: nn.Module, x: Tensor) -> Tensor:
    return block(x)  # type: ignore[no-any-return]


class _Staging:
    """Just enough of InputStaging for CompiledStep."""

    def __init__(self, *tensors: Tensor) -> None:
        self.tensors = list(tensors)
        self.device = torch.device("cpu")


def test_the_compiled_step_compiles_regions_on_a_copy_sharing_weights() -> None:
    module = _Blocks().eval()
    staging = _Staging(torch.randn(3, 4))
    step = CompiledStep(module, None, staging, RunnerConfig(compile_backend="eager"))  # type: ignore[arg-type]
    with torch.no_grad():
        step.warm(1)
        (out,) = step()
        expected = module(staging.tensors[0])
    torch.testing.assert_close(out, expected)
    assert module.block_call is _run  # the eager tiers' module is left uncompiled
    compiled = step.compiled.module  # type: ignore[union-attr]
    assert compiled is not module and compiled.block_call is not _run
    assert compiled.blocks[0].weight is module.blocks[0].weight  # shared, not copied


def test_only_a_module_with_its_own_compile_regions_is_regional() -> None:
    assert compiles_regions(_Blocks())
    assert not compiles_regions(nn.Linear(2, 2))

    class Plain(ServedModule):
        pass

    assert not compiles_regions(Plain())


def test_pi0_routes_every_layer_through_the_compiled_functions() -> None:
    torch.manual_seed(0)
    config = Pi0StepConfig(
        network=tiny_pi0_config(), state_size=3, action_size=3, camera_sizes=((20, 24),)
    )
    step = Pi0Step(config).eval()
    network = config.network
    calls: dict[str, int] = {}

    def counting(function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls[function.__name__] = calls.get(function.__name__, 0) + 1
            return function(*args, **kwargs)

        return wrapped

    frames = torch.randint(0, 256, (1, 1, 20, 24, 3), dtype=torch.uint8)
    state = torch.randn(1, 1, 3)
    noise = torch.randn(1, network.chunk_size, network.max_action_dim)
    prompt = torch.randn(1, network.tokenizer_max_length, network.language.width)
    mask = torch.ones(1, network.tokenizer_max_length)
    with torch.no_grad():
        expected = step(frames, state, noise, prompt, mask)
        assert step.compile_regions(counting)
        out = step(frames, state, noise, prompt, mask)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    language_depth, expert_depth = network.language.depth, network.expert.depth
    assert calls[run_encoder_layer.__name__] == network.vision.depth
    assert calls[joint_layer.__name__] == (
        language_depth + expert_depth * network.num_inference_steps
    )


def test_fused_linears_compute_the_same_and_hold_no_second_copy() -> None:
    torch.manual_seed(1)
    layers = [nn.Linear(6, 4), nn.Linear(6, 2), nn.Linear(6, 3)]
    x = torch.randn(5, 6)
    with torch.no_grad():
        expected = [layer(x) for layer in layers]
        fused = fuse_linears(layers)
        assert fused is not None
        out = fused(x).split(split_sizes(layers), dim=-1)
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got, want)
    storage = fused.weight.untyped_storage().data_ptr()
    assert all(layer.weight.untyped_storage().data_ptr() == storage for layer in layers)
    assert fuse_linears([nn.Linear(6, 4), nn.Linear(5, 4)]) is None  # different inputs
    assert fuse_linears([nn.Linear(6, 4), nn.Linear(6, 4, bias=False)]) is None

    class NotPlain(nn.Linear):  # a quantized layer, say
        pass

    assert fuse_linears([nn.Linear(6, 4), NotPlain(6, 4)]) is None


def test_the_served_pi0_copy_is_fused_and_the_eager_one_is_not() -> None:
    config = Pi0StepConfig(
        network=tiny_pi0_config(), state_size=3, action_size=3, camera_sizes=((20, 24),)
    )
    step = Pi0Step(config).eval()
    network = config.network
    inputs = (
        torch.randint(0, 256, (1, 1, 20, 24, 3), dtype=torch.uint8),
        torch.randn(1, 1, 3),
        torch.randn(1, network.chunk_size, network.max_action_dim),
        torch.randn(1, network.tokenizer_max_length, network.language.width),
        torch.ones(1, network.tokenizer_max_length),
    )
    compiled = CompiledStep(step, None, _Staging(*inputs), RunnerConfig(compile_backend="eager"))  # type: ignore[arg-type]
    with torch.no_grad():
        expected = step(*inputs)
        compiled.warm(1)
        (out,) = compiled()
    torch.testing.assert_close(out, expected)
    served = compiled.compiled.module  # type: ignore[union-attr]
    attentions = [m for m in step.modules() if isinstance(m, GemmaAttention)]
    assert attentions and all(m.fused_qkv is None for m in attentions)
    served_attention = next(m for m in served.modules() if isinstance(m, GemmaAttention))
    assert served_attention.fused_qkv is not None


def test_fusing_again_reuses_the_fused_weight() -> None:
    """One compiled copy per batch size fuses the same layers again: no second copy."""
    layers = [nn.Linear(6, 4), nn.Linear(6, 2)]
    first = fuse_linears(layers)
    second = fuse_linears(layers)
    assert first is not None and second is not None
    assert second.weight.data_ptr() == first.weight.data_ptr()
    assert second.bias is not None and first.bias is not None
    assert second.bias.data_ptr() == first.bias.data_ptr()
    x = torch.randn(3, 6)
    torch.testing.assert_close(second(x), first(x))


def test_freezing_compiles_the_whole_step_not_regions() -> None:
    """Frozen weights would be constants of the one block every layer shares."""
    module = _Blocks().eval()
    staging = _Staging(torch.randn(3, 4))
    config = RunnerConfig(compile_backend="eager", freezing=True)
    step = CompiledStep(module, None, staging, config)  # type: ignore[arg-type]
    with torch.no_grad():
        step.warm(1)
    assert step.compiled.module is module  # type: ignore[union-attr]  # the whole step, no copy
    assert module.block_call is _run
