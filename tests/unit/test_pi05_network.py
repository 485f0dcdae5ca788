"""The pi0.5 network (policies.pi05): LeRobot's PI05Pytorch key space, where it differs from
pi0 (no state token, adaRMS time conditioning, the longer prompt), the cache against a full
recompute, per-robot independence. Tiny widths, CPU."""

from __future__ import annotations

import pytest
import torch

from policies.pi0.config import Pi0Config
from policies.pi0.pi05_config import Pi05Config, tiny_pi05_config
from policies.pi0.pi05_network import Pi05Network
from policies.pi0.weights import expected_keys, expected_shapes
from tests.unit.test_pi0_network import (
    BATCH,
    noise_for,
    one_thread,  # noqa: F401  (autouse fixture)
    prefix_inputs,
    randomize,
)


def tiny_pi05(seed: int = 0, **overrides: object) -> Pi05Network:
    return randomize(Pi05Network(tiny_pi05_config(**overrides)), seed)  # type: ignore[return-value]


def test_state_dict_keys_and_shapes_are_lerobots() -> None:
    network = tiny_pi05()
    shapes = {key: tuple(value.shape) for key, value in network.state_dict().items()}
    assert shapes == expected_shapes(network.config)
    keys = set(expected_keys(network.config))
    expert = "paligemma_with_expert.gemma_expert.model."
    language = "paligemma_with_expert.paligemma.model.language_model."
    assert shapes[expert + "layers.0.input_layernorm.dense.weight"] == (96, 32)
    assert shapes[expert + "layers.1.post_attention_layernorm.dense.bias"] == (96,)
    assert shapes[expert + "norm.dense.weight"] == (96, 32)
    assert expert + "layers.0.input_layernorm.weight" not in keys
    assert expert + "norm.weight" not in keys
    assert language + "layers.0.input_layernorm.weight" in keys  # the VLM has plain norms
    assert language + "norm.weight" in keys
    assert {"time_mlp_in.weight", "time_mlp_in.bias", "time_mlp_out.weight"} <= keys
    assert not {"state_proj.weight", "action_time_mlp_in.weight"} & keys


def test_what_pi05_changes_from_pi0() -> None:
    config = Pi05Config()
    assert config.tokenizer_max_length == 200
    assert config.suffix_length == config.chunk_size == 50
    assert Pi0Config().suffix_length == 51
    real = expected_shapes(config)
    assert real["time_mlp_in.weight"] == (1024, 1024)
    dense = "paligemma_with_expert.gemma_expert.model.layers.17.input_layernorm.dense.weight"
    assert real[dense] == (3072, 1024)
    assert tiny_pi05().suffix_blocks.tolist() == [1, 0, 0, 0, 0, 0]


def test_real_size_network_has_lerobots_shapes() -> None:
    with torch.device("meta"):  # shapes only, no memory
        network = Pi05Network(Pi05Config())
    shapes = {key: tuple(value.shape) for key, value in network.state_dict().items()}
    assert shapes == expected_shapes(network.config)


def test_sample_actions_shape_and_determinism() -> None:
    network = tiny_pi05()
    inputs, noise = prefix_inputs(network), noise_for(network)
    assert inputs["prompt_embeddings"].shape == (BATCH, 5, 64)
    with torch.no_grad():
        first = network.sample_actions(**inputs, noise=noise)
        again = network.sample_actions(**inputs, noise=noise)
    assert first.shape == (BATCH, 6, 8)
    assert torch.isfinite(first).all()
    assert torch.equal(first, again)


def test_prefix_cache_equals_full_recompute() -> None:
    network = tiny_pi05()
    x_t = noise_for(network)
    with torch.no_grad():
        prefix, pad = network.embed_prefix(**prefix_inputs(network))
        cache = network.encode_prefix(prefix, pad)
        for t in (1.0, 0.3):
            time = torch.full((BATCH,), t)
            cached = network.velocity(cache, x_t, time)
            full = network.velocity_without_cache(prefix, pad, x_t, time)
            torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-5)


def test_time_reaches_the_expert_through_adarms_only() -> None:
    network = tiny_pi05()
    x_t = noise_for(network)
    with torch.no_grad():
        cache = network.encode_prefix(*network.embed_prefix(**prefix_inputs(network)))
        early = network.velocity(cache, x_t, torch.full((BATCH,), 0.9))
        late = network.velocity(cache, x_t, torch.full((BATCH,), 0.2))
        assert not torch.allclose(early, late)
        # With the norms' conditioning weights zeroed, the time no longer matters.
        for name, param in network.named_parameters():
            if ".dense.weight" in name:
                param.zero_()
        early = network.velocity(cache, x_t, torch.full((BATCH,), 0.9))
        late = network.velocity(cache, x_t, torch.full((BATCH,), 0.2))
    torch.testing.assert_close(early, late)


def test_a_robots_row_depends_only_on_its_own_inputs() -> None:
    network = tiny_pi05()
    inputs, noise = prefix_inputs(network), noise_for(network)
    changed = {key: value.clone() for key, value in inputs.items()}
    changed["prompt_embeddings"][0] += 1.0
    changed_noise = noise.clone()
    changed_noise[0] = -changed_noise[0]
    with torch.no_grad():
        base = network.sample_actions(**inputs, noise=noise)
        other = network.sample_actions(**changed, noise=changed_noise)
    torch.testing.assert_close(other[1:], base[1:], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(other[0], base[0])


def test_pi05_takes_no_state() -> None:
    network = tiny_pi05()
    with pytest.raises(ValueError, match="no state input"):
        network.embed_suffix(noise_for(network), torch.ones(BATCH), torch.zeros(BATCH, 8))
