"""The pi0 network (policies.pi0): LeRobot's key space, shapes, the prefix KV cache against a
full recompute, per-robot independence, masks, the Euler convention, weight loading refusals,
the host-side token table and PromptEmbedder. Tiny widths, CPU."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from policies.pi0.config import GemmaWidths, Pi0Config, tiny_pi0_config
from policies.pi0.gemma import (
    GemmaMLP,
    GemmaRMSNorm,
    RotaryEmbedding,
    additive_mask,
    apply_rotary,
    attend,
)
from policies.pi0.joint_attention import block_causal_mask
from policies.pi0.network import Pi0Network, sincos_time_embedding
from policies.pi0.prompt import PromptEmbedder
from policies.pi0.siglip import SiglipEmbeddings, SiglipMLP
from policies.pi0.weights import EMBED_TOKENS_KEY, apply_precision, expected_keys, expected_shapes

BATCH, CAMERAS = 3, 2


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny matrices: one thread is fastest, and keeps the shared machine's cores for others."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randomize(network: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter (the host tables included) drawn from a seeded normal, so tests do not
    depend on init schemes (zero norms, zero adaRMS weights)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in network.parameters():
            values = torch.randn(param.shape, generator=generator) * 0.3
            param.copy_(values.to(param.dtype))
    return network.eval()


def tiny_pi0(seed: int = 0, **overrides: object) -> Pi0Network:
    return randomize(Pi0Network(tiny_pi0_config(**overrides)), seed)  # type: ignore[return-value]


def prefix_inputs(network: torch.nn.Module, seed: int = 1) -> dict[str, torch.Tensor]:
    """Three robots: robot 1 has an empty second camera, prompts of different lengths."""
    config = network.config
    generator = torch.Generator().manual_seed(seed)
    size = config.vision.image_size
    length = config.tokenizer_max_length
    ids = torch.randint(0, config.vocab_size, (BATCH, length), generator=generator)
    embedder = PromptEmbedder.from_network(network)
    prompt_mask = torch.arange(length)[None] < torch.tensor([[3], [length], [1]])
    return {
        "images": torch.rand(BATCH, CAMERAS, 3, size, size, generator=generator) * 2 - 1,
        "image_masks": torch.tensor([[True, True], [True, False], [True, True]]),
        "prompt_embeddings": torch.from_numpy(embedder.embed(ids.numpy())),
        "prompt_mask": prompt_mask,
    }


def noise_for(network: torch.nn.Module, seed: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    config = network.config
    return torch.randn(BATCH, config.chunk_size, config.max_action_dim, generator=generator)


def state_for(network: Pi0Network, seed: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, network.config.max_state_dim, generator=generator)


# ---- Keys -------------------------------------------------------------------------------------


def test_state_dict_keys_and_shapes_are_lerobots() -> None:
    network = tiny_pi0()
    shapes = {key: tuple(value.shape) for key, value in network.state_dict().items()}
    assert shapes == expected_shapes(network.config)
    keys = set(expected_keys(network.config))
    tower = "paligemma_with_expert."
    vision = tower + "paligemma.model.vision_tower.vision_model."
    for key in (
        vision + "embeddings.patch_embedding.weight",
        vision + "encoder.layers.1.self_attn.out_proj.bias",
        vision + "post_layernorm.weight",
        tower + "paligemma.model.multi_modal_projector.linear.weight",
        tower + "paligemma.model.language_model.embed_tokens.weight",
        tower + "paligemma.model.language_model.layers.0.self_attn.k_proj.weight",
        tower + "paligemma.model.language_model.norm.weight",
        tower + "paligemma.lm_head.weight",
        tower + "gemma_expert.model.layers.1.mlp.down_proj.weight",
        tower + "gemma_expert.model.layers.0.input_layernorm.weight",
        tower + "gemma_expert.model.norm.weight",
        tower + "gemma_expert.lm_head.weight",
        "state_proj.weight",
        "action_in_proj.bias",
        "action_out_proj.weight",
        "action_time_mlp_in.weight",
        "action_time_mlp_out.bias",
    ):
        assert key in keys, key
    assert tower + "gemma_expert.model.embed_tokens.weight" not in keys
    assert not any("time_mlp_in" in key and "action" not in key for key in keys)
    assert not any("rotary" in key or "inv_freq" in key for key in keys)


def test_real_size_key_shapes() -> None:
    shapes = expected_shapes(Pi0Config())
    tower = "paligemma_with_expert."
    vision = tower + "paligemma.model.vision_tower.vision_model."
    language = tower + "paligemma.model.language_model."
    expert = tower + "gemma_expert.model."
    assert shapes[EMBED_TOKENS_KEY] == (257152, 2048)
    assert shapes[vision + "embeddings.patch_embedding.weight"] == (1152, 3, 14, 14)
    assert shapes[vision + "embeddings.position_embedding.weight"] == (256, 1152)
    assert shapes[vision + "encoder.layers.26.mlp.fc1.weight"] == (4304, 1152)
    assert shapes[tower + "paligemma.model.multi_modal_projector.linear.weight"] == (2048, 1152)
    assert shapes[language + "layers.17.self_attn.q_proj.weight"] == (2048, 2048)
    assert shapes[language + "layers.17.self_attn.k_proj.weight"] == (256, 2048)
    assert shapes[language + "layers.0.mlp.gate_proj.weight"] == (16384, 2048)
    assert shapes[expert + "layers.17.self_attn.q_proj.weight"] == (2048, 1024)
    assert shapes[expert + "layers.0.self_attn.o_proj.weight"] == (1024, 2048)
    assert shapes[expert + "layers.0.mlp.up_proj.weight"] == (4096, 1024)
    assert shapes[tower + "gemma_expert.lm_head.weight"] == (257152, 1024)
    assert shapes["action_time_mlp_in.weight"] == (1024, 2048)
    assert shapes["state_proj.weight"] == (1024, 32)
    assert vision + "encoder.layers.27.mlp.fc1.weight" not in shapes
    assert language + "layers.18.mlp.gate_proj.weight" not in shapes


def test_real_size_network_has_those_shapes() -> None:
    with torch.device("meta"):  # shapes only, no memory
        network = Pi0Network(Pi0Config())
    shapes = {key: tuple(value.shape) for key, value in network.state_dict().items()}
    assert shapes == expected_shapes(network.config)


# ---- Config -----------------------------------------------------------------------------------


def test_config_defaults_follow_the_variants() -> None:
    config = Pi0Config()
    assert (config.language.width, config.language.mlp_dim, config.language.num_kv_heads) == (
        2048,
        16384,
        1,
    )
    assert (config.expert.width, config.expert.mlp_dim, config.expert.head_dim) == (1024, 4096, 256)
    assert (config.vision.width, config.vision.depth, config.vision.num_patches) == (1152, 27, 256)
    assert (config.tokenizer_max_length, config.chunk_size, config.vocab_size) == (48, 50, 257152)
    assert config.suffix_length == 51


def test_config_refusals() -> None:
    with pytest.raises(ValidationError, match="unknown_field"):
        Pi0Config(unknown_field=1)
    with pytest.raises(ValidationError, match="same depth"):
        tiny_pi0_config(
            expert=GemmaWidths(
                width=32, depth=3, mlp_dim=64, num_heads=2, num_kv_heads=1, head_dim=16
            )
        )
    with pytest.raises(ValidationError, match="n_action_steps"):
        tiny_pi0_config(n_action_steps=7)
    with pytest.raises(ValidationError, match="image_resolution"):
        tiny_pi0_config(image_resolution=(28, 42))


# ---- Sampling ---------------------------------------------------------------------------------


def test_sample_actions_shape_and_determinism() -> None:
    network = tiny_pi0()
    inputs, state, noise = prefix_inputs(network), state_for(network), noise_for(network)
    with torch.no_grad():
        first = network.sample_actions(**inputs, state=state, noise=noise)
        again = network.sample_actions(**inputs, state=state, noise=noise)
        other = network.sample_actions(**inputs, state=state, noise=noise_for(network, seed=9))
    assert first.shape == (BATCH, 6, 8)
    assert first.dtype == torch.float32
    assert torch.isfinite(first).all()
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)


def test_prefix_cache_equals_full_recompute() -> None:
    network = tiny_pi0()
    state, x_t = state_for(network), noise_for(network)
    with torch.no_grad():
        prefix, pad = network.embed_prefix(**prefix_inputs(network))
        cache = network.encode_prefix(prefix, pad)
        for t in (1.0, 0.4):
            time = torch.full((BATCH,), t)
            cached = network.velocity(cache, state, x_t, time)
            full = network.velocity_without_cache(prefix, pad, state, x_t, time)
            torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-5)
    # The cache ends in masked spare slots so that cache + suffix keys are a multiple of 8.
    length, suffix = CAMERAS * 4 + 5, network.config.suffix_length
    spare = -(length + suffix) % 8
    assert cache.keys.shape == (2, BATCH, 1, length + spare, 16)
    assert (length + spare + suffix) % 8 == 0
    assert cache.values.shape == cache.keys.shape
    assert not cache.pad[:, length:].any()


def test_one_euler_step_is_noise_minus_velocity_at_t1() -> None:
    network = tiny_pi0(num_inference_steps=1)
    inputs, state, noise = prefix_inputs(network), state_for(network), noise_for(network)
    with torch.no_grad():
        actions = network.sample_actions(**inputs, state=state, noise=noise)
        cache = network.encode_prefix(*network.embed_prefix(**inputs))
        velocity = network.velocity(cache, state, noise, torch.ones(BATCH))
    torch.testing.assert_close(actions, noise - velocity)


def test_a_robots_row_depends_only_on_its_own_inputs() -> None:
    network = tiny_pi0()
    inputs, state, noise = prefix_inputs(network), state_for(network), noise_for(network)
    changed = {key: value.clone() for key, value in inputs.items()}
    changed["images"][1] = -changed["images"][1]
    changed["prompt_embeddings"][1] += 1.0
    changed["prompt_mask"][1, 2:] = False
    changed_state, changed_noise = state.clone(), noise.clone()
    changed_state[1] += 1.0
    changed_noise[1] = -changed_noise[1]
    with torch.no_grad():
        base = network.sample_actions(**inputs, state=state, noise=noise)
        other = network.sample_actions(**changed, state=changed_state, noise=changed_noise)
        alone = network.sample_actions(
            **{key: value[2:] for key, value in inputs.items()}, state=state[2:], noise=noise[2:]
        )
    torch.testing.assert_close(other[[0, 2]], base[[0, 2]], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(other[1], base[1])
    torch.testing.assert_close(alone[0], base[2], rtol=1e-5, atol=1e-5)


def test_padded_prompt_tokens_and_empty_cameras_are_ignored() -> None:
    network = tiny_pi0()
    inputs, state, noise = prefix_inputs(network), state_for(network), noise_for(network)
    changed = {key: value.clone() for key, value in inputs.items()}
    changed["prompt_embeddings"][0, 3:] = 5.0  # robot 0's prompt is 3 tokens long
    changed["images"][1, 1] = 0.5  # robot 1's second camera is empty
    with torch.no_grad():
        base = network.sample_actions(**inputs, state=state, noise=noise)
        other = network.sample_actions(**changed, state=state, noise=noise)
        shown = dict(inputs, image_masks=torch.ones(BATCH, CAMERAS, dtype=torch.bool))
        with_camera = network.sample_actions(**shown, state=state, noise=noise)
    torch.testing.assert_close(other, base, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(with_camera[1], base[1])


def test_the_state_token_is_its_own_block() -> None:
    network = tiny_pi0()
    assert network.suffix_blocks.tolist() == [1, 1, 0, 0, 0, 0, 0]
    blocks = torch.cat([torch.zeros(2, dtype=torch.long), network.suffix_blocks])[None]
    allowed = block_causal_mask(torch.ones(1, 9, dtype=torch.bool), blocks)[0]
    assert allowed[:2, 2:].sum() == 0  # the prefix sees no suffix token
    assert allowed[2, :3].all() and not allowed[2, 3:].any()  # state: prefix and itself
    assert allowed[3:, :].all()  # actions: everything, each other both ways


# ---- Layer math -------------------------------------------------------------------------------


def test_grouped_query_attention_matches_repeated_keys() -> None:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 8, generator=generator)
    k = torch.randn(2, 2, 7, 8, generator=generator)
    v = torch.randn(2, 2, 7, 8, generator=generator)
    allowed = torch.rand(2, 5, 7, generator=generator) > 0.3
    allowed[..., 0] = True
    out = attend(q, k, v, additive_mask(allowed, q.dtype, repeat=2), scale=8**-0.5)
    k_rep, v_rep = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = (q @ k_rep.transpose(-1, -2)) * 8**-0.5
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    expected = (scores.softmax(dim=-1) @ v_rep).transpose(1, 2).reshape(2, 5, 32)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_rms_norm_scales_by_one_plus_weight() -> None:
    norm = GemmaRMSNorm(4, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([0.0, 1.0, -0.5, 2.0]))
    x = torch.tensor([[[1.0, -2.0, 3.0, 0.5]]])
    out, gate = norm(x)
    rms = torch.sqrt((x**2).mean() + 1e-6)
    torch.testing.assert_close(out, x / rms * torch.tensor([1.0, 2.0, 0.5, 3.0]))
    assert gate is None
    assert norm(x.to(torch.bfloat16))[0].dtype == torch.bfloat16


def test_adaptive_rms_norm_takes_scale_shift_gate_from_the_condition() -> None:
    norm = GemmaRMSNorm(2, eps=1e-6, cond_dim=1)
    assert not norm.dense.weight.any()  # type: ignore[union-attr]
    with torch.no_grad():
        norm.dense.weight.copy_(torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]]))  # type: ignore[union-attr]
        norm.dense.bias.zero_()  # type: ignore[union-attr]
    x = torch.tensor([[[3.0, -4.0]], [[1.0, 1.0]]])
    cond = torch.tensor([[1.0], [0.5]])
    out, gate = norm(x, cond)
    normed = x / torch.sqrt((x**2).mean(dim=-1, keepdim=True) + 1e-6)
    scale, shift = (
        cond[:, None] * torch.tensor([1.0, 2.0]),
        cond[:, None] * torch.tensor([3.0, 4.0]),
    )
    torch.testing.assert_close(out, normed * (1 + scale) + shift)
    torch.testing.assert_close(gate, cond[:, None] * torch.tensor([5.0, 6.0]))


def test_rotary_turns_each_half_pair_by_position_times_frequency() -> None:
    rotary = RotaryEmbedding(head_dim=4, theta=10000.0)
    torch.testing.assert_close(rotary.inv_freq, torch.tensor([1.0, 0.01]))
    cos, sin = rotary(torch.tensor([[3]]), torch.float32)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 1, 4)
    out = apply_rotary(x, cos, sin).flatten()
    for pair, angle in ((0, 3.0), (1, 0.03)):
        a, b = x.flatten()[pair], x.flatten()[pair + 2]
        expected_a = a * math.cos(angle) - b * math.sin(angle)
        expected_b = b * math.cos(angle) + a * math.sin(angle)
        torch.testing.assert_close(out[pair], expected_a)
        torch.testing.assert_close(out[pair + 2], expected_b)


def test_gemma_mlp_is_gelu_tanh_gated() -> None:
    widths = GemmaWidths(width=2, depth=1, mlp_dim=1, num_heads=1, num_kv_heads=1, head_dim=2)
    mlp = GemmaMLP(widths)
    with torch.no_grad():
        mlp.gate_proj.weight.copy_(torch.tensor([[1.0, 0.0]]))
        mlp.up_proj.weight.copy_(torch.tensor([[0.0, 1.0]]))
        mlp.down_proj.weight.copy_(torch.tensor([[1.0], [2.0]]))
    x = torch.tensor([[0.7, -3.0]])
    g = 0.7
    gelu = 0.5 * g * (1 + math.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
    torch.testing.assert_close(mlp(x), torch.tensor([[gelu * -3.0, 2 * gelu * -3.0]]))


def test_siglip_tokens_are_row_major_patches_plus_positions() -> None:
    widths = tiny_pi0_config().vision  # 28x28 images, 14-pixel patches: 2x2 tokens
    embeddings = SiglipEmbeddings(widths)
    with torch.no_grad():
        embeddings.patch_embedding.weight.zero_()
        embeddings.patch_embedding.weight[0, 0] = 1.0  # channel 0 of token = sum of red pixels
        embeddings.patch_embedding.bias.zero_()
        embeddings.position_embedding.weight.zero_()
        embeddings.position_embedding.weight[:, 1] = torch.arange(4.0)
    image = torch.zeros(1, 3, 28, 28)
    image[0, 0, :14, 14:] = 1.0  # top-right patch
    tokens = embeddings(image)
    assert tokens.shape == (1, 4, 32)
    assert tokens[0, :, 0].tolist() == [0.0, 196.0, 0.0, 0.0]
    assert tokens[0, :, 1].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_siglip_mlp_is_gelu_tanh() -> None:
    mlp = SiglipMLP(tiny_pi0_config().vision)
    x = torch.randn(2, 3, 32)
    hidden = torch.nn.functional.gelu(mlp.fc1(x), approximate="tanh")
    torch.testing.assert_close(mlp(x), mlp.fc2(hidden))


def test_wrong_image_size_is_one_sentence() -> None:
    network = tiny_pi0()
    inputs = prefix_inputs(network)
    inputs["images"] = torch.zeros(BATCH, CAMERAS, 3, 32, 32)
    with pytest.raises(ValueError, match=r"expected \(robots, cameras, 3, 28, 28\)"):
        network.embed_prefix(**inputs)


def test_time_embedding_is_sine_then_cosine() -> None:
    embedding = sincos_time_embedding(torch.tensor([0.0, 0.5]), 8, 4e-3, 4.0)
    assert embedding.dtype == torch.float32
    torch.testing.assert_close(embedding[0], torch.tensor([0.0] * 4 + [1.0] * 4))
    periods = 4e-3 * (4.0 / 4e-3) ** torch.linspace(0, 1, 4, dtype=torch.float64)
    expected = torch.sin(0.5 * 2 * math.pi / periods).float()
    torch.testing.assert_close(embedding[1, :4], expected)


# ---- Weights ----------------------------------------------------------------------------------


def test_load_weights_round_trip() -> None:
    source, target = tiny_pi0(seed=0), tiny_pi0(seed=5)
    inputs, state, noise = prefix_inputs(source), state_for(source), noise_for(source)
    target.load_weights(source.state_dict())
    with torch.no_grad():
        expected = source.sample_actions(**inputs, state=state, noise=noise)
        loaded = target.sample_actions(**inputs, state=state, noise=noise)
    torch.testing.assert_close(loaded, expected, rtol=0, atol=0)


def test_load_weights_refusals_name_the_keys_and_load_nothing() -> None:
    network = tiny_pi0(seed=0)
    before = {key: value.clone() for key, value in network.state_dict().items()}
    good = tiny_pi0(seed=7).state_dict()
    missing = dict(good)
    del missing["state_proj.weight"]
    unexpected = dict(good, **{"model.state_proj.weight": good["state_proj.weight"]})
    misshapen = dict(good, **{"action_out_proj.bias": torch.zeros(9)})
    for tensors, words in (
        (missing, ["1 missing", "state_proj.weight"]),
        (unexpected, ["1 unexpected", "model.state_proj.weight"]),
        (misshapen, ["wrong shape", "action_out_proj.bias (9,) instead of (8,)"]),
    ):
        with pytest.raises(ValueError) as refusal:
            network.load_weights(tensors)
        message = str(refusal.value)
        assert "\n" not in message
        for word in words:
            assert word in message
    for key, value in network.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_vocabulary_tables_stay_on_the_host_as_loaded() -> None:
    network = tiny_pi0()
    table = torch.randn(300, 64, dtype=torch.bfloat16)
    tensors = dict(network.state_dict(), **{EMBED_TOKENS_KEY: table})
    network.load_weights(tensors)
    network.to(torch.float64)
    held = network.get_parameter(EMBED_TOKENS_KEY)
    assert torch.equal(held, table) and held.dtype == torch.bfloat16 and held.device.type == "cpu"
    # A copy of its own: the loaded tensor may be mapped from a file that can be overwritten
    # (tests/unit/test_pi0_checkpoint_overwritten.py).
    assert held.data_ptr() != table.data_ptr()
    lm_head = network.get_parameter("paligemma_with_expert.gemma_expert.lm_head.weight")
    assert lm_head.dtype == torch.float32
    assert network.action_in_proj.weight.dtype == torch.float64


def test_bfloat16_precision_is_lerobots_mix() -> None:
    network = tiny_pi0()
    inputs, state, noise = prefix_inputs(network), state_for(network), noise_for(network)
    with torch.no_grad():
        full = network.sample_actions(**inputs, state=state, noise=noise)
    apply_precision(network, "bfloat16")
    tower = network.paligemma_with_expert
    language = tower.paligemma.model.language_model
    assert language.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert tower.gemma_expert.model.layers[1].mlp.up_proj.weight.dtype == torch.bfloat16
    assert language.layers[0].input_layernorm.weight.dtype == torch.float32
    assert tower.gemma_expert.model.norm.weight.dtype == torch.float32
    vision = tower.paligemma.model.vision_tower.vision_model
    assert vision.encoder.layers[0].mlp.fc1.weight.dtype == torch.float32
    assert tower.paligemma.model.multi_modal_projector.linear.weight.dtype == torch.float32
    assert network.action_in_proj.weight.dtype == torch.float32
    assert language.rotary_emb.inv_freq.dtype == torch.bfloat16
    with torch.no_grad():
        half = network.sample_actions(**inputs, state=state, noise=noise)
    assert half.dtype == torch.float32
    assert torch.isfinite(half).all()
    assert (half - full).abs().mean() < 0.1 * full.abs().mean()


# ---- Prompt embedding -------------------------------------------------------------------------


def test_prompt_embedder_scales_rows_by_sqrt_width() -> None:
    network = tiny_pi0()
    table = network.get_parameter(EMBED_TOKENS_KEY).detach()
    embedder = PromptEmbedder.from_weights(network.state_dict())
    out = embedder.embed([[3, 7, 299]])
    assert out.dtype == np.float32 and out.shape == (1, 3, 64)
    np.testing.assert_allclose(out[0, 1], table[7].numpy() * math.sqrt(64), rtol=1e-6)
    shared = PromptEmbedder.from_network(network).embed([3, 7, 299])
    np.testing.assert_array_equal(shared, out[0])
    rounded = PromptEmbedder(table, torch.bfloat16).embed([7])[0]
    expected = (table[7].to(torch.bfloat16) * torch.tensor(8.0, dtype=torch.bfloat16)).float()
    np.testing.assert_array_equal(rounded, expected.numpy())
    with pytest.raises(ValueError, match=r"\[0, 300\)"):
        embedder.embed([1, 300])
    with pytest.raises(ValueError, match="no token table"):
        PromptEmbedder.from_weights({})
