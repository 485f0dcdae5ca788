"""DuQuant's transform and W4A8 arithmetic: exact where they must be, better than RTN where
outliers are."""

from __future__ import annotations

import pytest
import torch

from policies.quant.duquant import (
    StatsCollector,
    duquant_plan,
    identity_plan,
    spreading_rotation,
    zigzag_permutation,
)
from policies.quant.layer import QuantLinear
from policies.quant.numerics import (
    exact_int_matmul,
    int8_matmul,
    pack_int4,
    quantize_weight,
    unpack_int4,
)


def _outlier_data(seed: int = 0, outlier: float = 100.0):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(48, 128, generator=gen, dtype=torch.float64) / 128**0.5
    x = torch.randn(400, 128, generator=gen, dtype=torch.float64)
    channels = torch.tensor([3, 40, 41, 97])
    x[:, channels] *= outlier  # a few input channels 100x the others, as LLM-style outliers
    weight[:, 7] *= outlier  # and one weight column
    return weight, x


def _plan(weight, x, block=32):
    collector = StatsCollector()
    for part in x.split(100):
        collector.update(part)
    assert collector.stats is not None
    return duquant_plan(weight, collector.stats, block, alpha=0.5, steps=32)


def test_the_rotated_permuted_smoothed_layer_equals_the_plain_one_in_float64():
    weight, x = _outlier_data()
    plan = _plan(weight, x)
    assert plan.smooth is not None and plan.perm is not None and plan.rot1 is not None
    plain = x @ weight.t()
    transformed = plan.transform_input(x) @ plan.transform_weight(weight).t()
    assert (transformed - plain).abs().max() / plain.abs().max() < 1e-10


def test_an_imported_output_rotation_is_undone_exactly_in_float64():
    weight, x = _outlier_data(seed=1)
    plan = _plan(weight, x)
    out_rot = torch.linalg.qr(torch.randn(3, 16, 16, dtype=torch.float64))[0]
    w = QuantLinear.transformed_weight(weight, plan, out_rot)
    from policies.quant.transform import rotate_blocks

    y = rotate_blocks(plan.transform_input(x) @ w.t(), out_rot)
    plain = x @ weight.t()
    assert (y - plain).abs().max() / plain.abs().max() < 1e-10


def test_rotations_are_orthogonal_and_the_permutation_is_a_bijection():
    weight, x = _outlier_data()
    plan = _plan(weight, x)
    eye = torch.eye(32, dtype=torch.float64)
    for rotation in (plan.rot1, plan.rot2):
        assert rotation is not None and rotation.shape == (4, 32, 32)
        assert (rotation @ rotation.transpose(1, 2) - eye).abs().max() < 1e-12
    assert plan.perm is not None
    assert sorted(plan.perm.tolist()) == list(range(128))
    spread = spreading_rotation(16)
    assert torch.allclose(spread @ spread.t(), torch.eye(16, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(spread[0], torch.full((16,), 0.25, dtype=torch.float64))


def test_the_greedy_rotation_lowers_the_activation_peak():
    weight, x = _outlier_data()
    plan = _plan(weight, x)
    smoothed_peak = (x / plan.smooth).abs().max()  # type: ignore[operator]
    assert plan.transform_input(x).abs().max() < 0.5 * smoothed_peak


def test_zigzag_deals_the_largest_channels_to_different_blocks():
    magnitude = torch.arange(64, dtype=torch.float64)  # channel 63 largest
    perm = zigzag_permutation(magnitude, block=16)
    blocks = perm.reshape(4, 16)
    # The four largest channels land one per block, the next four back in reverse order.
    assert [int(b[0]) for b in blocks] == [63, 62, 61, 60]
    assert [int(b[1]) for b in blocks] == [56, 57, 58, 59]
    sums = magnitude[blocks].sum(dim=1)
    assert sums.max() - sums.min() <= 16


@pytest.mark.parametrize("m", [1, 3, 17, 40])
def test_the_int32_accumulator_equals_an_exact_integer_matmul(m):
    gen = torch.Generator().manual_seed(m)
    k = 4096  # long sums of extreme products: 4096 * 127 * 8 fits int32 and must stay exact
    q = torch.randint(-127, 128, (m, k), generator=gen, dtype=torch.int8)
    q[0, :] = 127
    w = torch.randint(-8, 8, (24, k), generator=gen, dtype=torch.int8)
    w[0, :] = -8
    acc = int8_matmul(q, w.t())
    assert acc.dtype == torch.int32
    assert torch.equal(acc.long(), exact_int_matmul(q, w.t()))
    assert int(acc[0, 0]) == -127 * 8 * k


def test_int4_codes_pack_two_per_byte_and_unpack_exactly():
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(-8, 8, (5, 7), generator=gen, dtype=torch.int8)
    packed = pack_int4(q)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 4)
    assert torch.equal(unpack_int4(packed, 7), q)
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(torch.tensor([[9]], dtype=torch.int8))


def test_weight_codes_are_4_bit_and_clip_search_lowers_the_error():
    weight, _ = _outlier_data()
    for clip in (False, True):
        q, scale = quantize_weight(weight, clip_search=clip)
        assert int(q.min()) >= -8 and int(q.max()) <= 7 and scale.shape == (48,)
    q0, s0 = quantize_weight(weight, clip_search=False)
    q1, s1 = quantize_weight(weight, clip_search=True)
    error = [
        ((q.double() * s.double()[:, None] - weight) ** 2).sum() for q, s in ((q0, s0), (q1, s1))
    ]
    assert error[1] <= error[0]


def _layer(weight, x, plan, static=True):
    scale = float(plan.transform_input(x).abs().max()) / 127 if static else None
    return QuantLinear.from_plan(weight.float(), None, plan, scale)


def _relative(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_duquant_beats_round_to_nearest_on_100x_outlier_channels():
    weight, x = _outlier_data()
    plain = x @ weight.t()
    duquant = _layer(weight, x, _plan(weight, x))(x.float())
    rtn = _layer(weight, x, identity_plan(128, 32))(x.float())
    error_duquant, error_rtn = _relative(duquant, plain), _relative(rtn, plain)
    assert error_duquant < 0.5 * error_rtn, (error_duquant, error_rtn)


@pytest.mark.parametrize("static", [True, False])
def test_int8_and_dequant_paths_equal_the_fake_quant_reference_in_fp32(static):
    weight, x = _outlier_data()
    layer = _layer(weight, x, _plan(weight, x), static)
    xf = x.float()
    reference = layer.reference_product(xf)
    assert _relative(layer.int8_product(xf), reference) < 1e-5
    assert _relative(layer.dequant_product(xf), reference) < 1e-5
    assert torch.equal(layer(xf), layer.reference_product(xf))  # eager FP32 is the reference


def test_packed_weights_give_the_same_layer_in_a_quarter_of_fp16():
    from policies.quant.layer import memory_bytes

    weight, x = _outlier_data()
    plan = _plan(weight, x)
    scale = float(plan.transform_input(x).abs().max()) / 127
    one = QuantLinear.from_plan(weight.float(), None, plan, scale)
    two = QuantLinear.from_plan(weight.float(), None, plan, scale, packed=True)
    assert torch.equal(one(x.float()), two(x.float()))
    memory = memory_bytes(two)
    assert memory["weights"] <= 0.3 * memory["fp16"]
