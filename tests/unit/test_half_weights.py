"""The half-precision tiers' copy of the model with its matmul weights already in half precision:
the same results as autocast's per-call casts, the FP32 reference untouched."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.compile_cache import cache_key  # noqa: E402
from controller.inference.half_weights import half_weight_copy, precasts_half_weights  # noqa: E402
from controller.inference.tiers import EagerTier, build_tiers  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.act.transformer import Attention  # noqa: E402
from policies.demo import make_demo_policy  # noqa: E402
from policies.tensor_policy import example_inputs  # noqa: E402
from policies.tiny import build_tiny_policy  # noqa: E402


@pytest.fixture(scope="module")
def act():  # type: ignore[no-untyped-def]
    policy = make_demo_policy(cameras=(("front", 48, 64),), chunk_size=5)
    policy.module.use_channels_last()
    return policy


def test_matmul_and_convolution_weights_are_half_the_rest_as_it_was(act) -> None:  # type: ignore[no-untyped-def]
    module = act.module
    assert precasts_half_weights(module)
    twin = half_weight_copy(module, torch.bfloat16)
    for (name, before), (_, after) in zip(
        module.named_parameters(), twin.named_parameters(), strict=True
    ):
        owner = twin.get_submodule(name.rpartition(".")[0])
        matmul = isinstance(owner, (torch.nn.Linear, torch.nn.Conv2d, Attention))
        assert after.dtype == (torch.bfloat16 if matmul else torch.float32), name
        assert before.dtype == torch.float32, name  # the original keeps FP32
        assert not (matmul and after.requires_grad), name
        if after.dim() == 4:  # the layout the runner chose stays
            assert after.is_contiguous(memory_format=torch.channels_last), name
    assert all(b.dtype == a.dtype for a, b in zip(module.buffers(), twin.buffers(), strict=True))


def test_the_copy_computes_what_autocast_computes_from_fp32_weights(act) -> None:  # type: ignore[no-untyped-def]
    twin = half_weight_copy(act.module, torch.bfloat16)
    inputs = example_inputs(act.spec, seed=3)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = act.module(*inputs).float()
        got = twin(*inputs).float()
    assert torch.isfinite(expected).all()
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_only_a_module_that_asks_gets_the_copy() -> None:
    tiny = build_tiny_policy(seed=0).module
    assert not precasts_half_weights(tiny)


class _CudaStaging:
    """Just enough of InputStaging for build_tiers, which compiles nothing."""

    device = torch.device("cuda")
    tensors: tuple[object, ...] = ()


def test_on_cuda_the_half_tiers_get_the_copy_and_the_reference_the_original(act) -> None:  # type: ignore[no-untyped-def]
    config = RunnerConfig(cache_dir=None, precision="bf16")
    tiers = build_tiers(["eager_half", "eager_fp32"], act.module, _CudaStaging(), config)  # type: ignore[arg-type]
    half, reference = tiers["eager_half"], tiers["eager_fp32"]
    assert isinstance(half, EagerTier) and isinstance(reference, EagerTier)
    assert reference.module is act.module
    assert half.module is not act.module
    assert half.module.action_head.weight.dtype == torch.bfloat16


def test_the_copy_shares_what_it_does_not_cast_and_keeps_ties() -> None:
    class Tied(torch.nn.Module):
        precast_half_weights = True

        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)
            self.b.weight = self.a.weight  # one tensor, two layers
            self.norm = torch.nn.LayerNorm(4)
            self.register_buffer("scale", torch.ones(4))

    module = Tied()
    twin = half_weight_copy(module, torch.float16)
    assert twin.a.weight is twin.b.weight and twin.a.weight.dtype == torch.float16
    assert twin.norm.weight is module.norm.weight  # not cast: shared, not copied
    assert twin.scale is module.scale
    assert twin.a is not module.a  # the modules are the copy's own (hooks stay apart)


def test_compiled_and_graph_tiers_get_the_copy_too_and_the_cache_key_says_so(act) -> None:  # type: ignore[no-untyped-def]
    config = RunnerConfig(cache_dir=None, precision="bf16")
    tiers = build_tiers(["graph", "compiled", "eager_half"], act.module, _CudaStaging(), config)  # type: ignore[arg-type]
    half = tiers["eager_half"].module
    for name in ("graph", "compiled"):
        assert tiers[name].module is half, name
    spec = act.spec
    asked = cache_key(spec, act.module, config, torch.device("cpu"))
    type(act.module).precast_half_weights = False
    try:
        assert cache_key(spec, act.module, config, torch.device("cpu")) != asked
    finally:
        type(act.module).precast_half_weights = True


def test_the_copy_names_the_weights_it_holds_exactly() -> None:
    """`exact` collects the weights the cast left unchanged (stored in BF16 already), so the
    FP32 reference can read those from the copy; a weight with more precision than BF16 is
    not among them."""
    stored_in_bf16, full_precision = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    with torch.no_grad():
        stored_in_bf16.weight.copy_(stored_in_bf16.weight.bfloat16().float())
        full_precision.weight.copy_(torch.full((8, 8), 1.0 + 2.0**-12))
    module = torch.nn.Sequential(stored_in_bf16, full_precision)
    exact: dict[int, torch.Tensor] = {}
    twin = half_weight_copy(module, torch.bfloat16, exact=exact)
    held = exact[id(stored_in_bf16.weight)]
    # The copy's parameter itself: where a compiled tier re-points it (fused projections), the
    # reference follows, and no old storage is kept alive beside the new.
    assert held is twin[0].weight
    assert id(full_precision.weight) not in exact
    assert torch.equal(held.float(), stored_in_bf16.weight)
