"""Quantized checkpoints: save/load round trip, `tempo quantize`, serving through the runner
with start-up parity against the FP32 model, and the pi0 DuQuant port's .npz packs."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from controller.cli import main
from controller.errors import CheckpointError, PolicyError
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from controller.tools.quantize import stacked_observations
from policies.checkpoints.load import describe_checkpoint, load_checkpoint
from policies.checkpoints.tempo_format import read_tempo_checkpoint, save_checkpoint
from policies.quant.apply import quantize_module
from policies.quant.checkpoint import save_quantized_checkpoint
from policies.quant.config import Quantization, QuantSettings
from policies.quant.layer import QuantLinear
from policies.quant.pi0_packs import import_pi0_packs, pack_file_name
from policies.tensor_policy import ReferenceChunks, TensorPolicy, example_inputs
from tests.quant_fixtures import calibration_runner, small_act_policy

SETTINGS = QuantSettings(block_size=16, rotation_steps=8)


def _quantized(settings: QuantSettings = SETTINGS) -> tuple[TensorPolicy, Quantization]:
    policy = small_act_policy()
    layouts = quantize_module(policy.module, settings, calibration_runner(policy))
    record = Quantization(
        source="calibrated",
        settings=settings,
        observations=6,
        layers=layouts,
        fp32_reference_observations=0,
    )
    return policy, record


@pytest.mark.parametrize("packed", [False, True])
def test_a_quantized_checkpoint_round_trips(tmp_path, packed):
    settings = SETTINGS.model_copy(update={"packed_weights": packed})
    policy, record = _quantized(settings)
    assert len(record.layers) == 16  # encoder: q, k, v, out, 2 MLP; decoder: 2 x 4 + 2
    images, state = stacked_observations(policy.spec, 2, seed=5)
    chunks = np.zeros((2, 8, 6), dtype=np.float32)
    policy.reference = ReferenceChunks(images=images, state=state, chunks=chunks)
    save_quantized_checkpoint(tmp_path, policy, record)
    stored = load_file(str(tmp_path / "model.safetensors"))
    codes = [k for k in stored if k.endswith(".weight_packed")]
    assert len(codes) == 16 and all(stored[k].dtype == torch.uint8 for k in codes)
    assert not any(k.endswith(".weight_q") for k in stored)

    loaded = load_checkpoint(tmp_path)
    layers = [m for m in loaded.module.modules() if isinstance(m, QuantLinear)]
    assert len(layers) == 16 and all(layer.packed == packed for layer in layers)
    inputs = example_inputs(policy.spec, seed=3)
    with torch.no_grad():
        assert torch.equal(loaded.module(*inputs), policy.module(*inputs))
    assert loaded.reference is not None
    assert np.array_equal(loaded.reference.images, images)
    assert "quantization: w4a8 duquant, 16 layers" in describe_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="quantized"):
        read_tempo_checkpoint(tmp_path, json.loads((tmp_path / "config.json").read_text()))


def test_a_quantized_checkpoint_with_a_bad_code_tensor_is_refused(tmp_path):
    policy, record = _quantized()
    save_quantized_checkpoint(tmp_path, policy, record)
    path = tmp_path / "model.safetensors"
    tensors = load_file(str(path))
    key = next(k for k in tensors if k.endswith(".weight_packed"))
    tensors[key] = tensors[key][:, :-1].contiguous()
    save_file(tensors, str(path))
    with pytest.raises(CheckpointError, match="weight_packed"):
        load_checkpoint(tmp_path)


def test_tempo_quantize_writes_a_checkpoint_the_runner_serves_with_parity(tmp_path, capsys):
    fp32 = small_act_policy()
    save_checkpoint(tmp_path / "fp32", fp32)
    code = main(
        [
            "quantize",
            str(tmp_path / "fp32"),
            str(tmp_path / "w4a8"),
            "--observations",
            "6",
            "--block-size",
            "16",
            "--activations",
            "dynamic",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "16 W4A8 layers" in printed and "against FP32" in printed
    # Progress goes to stderr, each step in order; stdout holds the report's four lines only.
    assert len(printed.splitlines()) == 4 and "tempo quantize:" not in printed
    steps = [line.removeprefix("tempo quantize: ") for line in captured.err.splitlines()]
    wanted = [
        "loading",
        "running the FP32 model",
        "calibrating on 6",
        "calibrating and",
        "measuring",
        "writing",
    ]
    starts = [next(i for i, s in enumerate(steps) if s.startswith(w)) for w in wanted]
    assert starts == sorted(starts)

    policy = load_checkpoint(tmp_path / "w4a8")
    assert policy.reference is not None and policy.reference.chunks.shape == (4, 8, 6)
    # A 32-wide ACT loses a lot to 4-bit weights; the mechanism, not the figure, is tested here.
    config = RunnerConfig(
        top_tier="eager_fp32", cache_dir=None, step_budget_ms=None, reference_parity_rtol=1.0
    )
    runner = Runner(policy, config, device="cpu")
    runner.start()
    (report,) = runner.status()["tiers"]  # type: ignore[misc]
    assert report["state"] == "ready" and report["parity_error"] == 0.0
    assert 0.0 < report["reference_error"] < config.reference_parity_rtol
    # The quantized model differs from FP32; a tolerance tighter than its error is refused.
    strict = config.model_copy(update={"reference_parity_rtol": report["reference_error"] / 2})
    with pytest.raises(PolicyError, match="reference_parity_rtol"):
        Runner(load_checkpoint(tmp_path / "w4a8"), strict, device="cpu").start()


def test_rtn_and_dynamic_scales_quantize_too():
    policy = small_act_policy()
    reference = copy.deepcopy(policy.module)
    settings = QuantSettings(method="rtn", activations="dynamic", layers="transformer+head")
    layouts = quantize_module(policy.module, settings, calibration_runner(policy))
    assert "action_head" in layouts and not any(layout.static for layout in layouts.values())
    inputs = example_inputs(policy.spec, seed=9)
    with torch.no_grad():
        out, ref = policy.module(*inputs), reference(*inputs)
    assert 0.0 < float((out - ref).norm() / ref.norm()) < 0.2


def _write_pack(directory, name, in_features, out_features, block, seed):
    gen = np.random.default_rng(seed)
    perm = gen.permutation(in_features).astype(np.int64)
    data = {
        "weight_scale": np.ones(out_features, dtype=np.float32),
        "meta": json.dumps(
            {
                "in_features": in_features,
                "out_features": out_features,
                "block_size": block,
                "block_out_size": block,
                "enable_permute": True,
                "lambda_smooth": 0.15,
            }
        ),
        "perm": perm,
    }
    n_blocks = -(-in_features // block)
    for b in range(n_blocks):  # the port's last block is as wide as what is left
        k = min(block, in_features - b * block)
        data[f"Rin_{b}"] = np.linalg.qr(gen.standard_normal((k, k)))[0].astype(np.float32)
    data["R_in_blocks"] = np.arange(n_blocks, dtype=np.int64)
    for b in range(out_features // block):
        data[f"Rout_{b}"] = np.linalg.qr(gen.standard_normal((block, block)))[0].astype(np.float32)
    data["R_out_blocks"] = np.arange(out_features // block, dtype=np.int64)
    np.savez(directory / pack_file_name(name), **data)


def test_pi0_duquant_packs_import_without_pickle(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    reference = copy.deepcopy(model)
    _write_pack(tmp_path, "0", 40, 32, 16, seed=1)  # 40 = 2.5 blocks: the last one padded
    _write_pack(tmp_path, "2", 32, 16, 16, seed=2)
    layouts = import_pi0_packs(model, tmp_path)
    assert set(layouts) == {"0", "2"} and layouts["0"].out_block == 16
    assert isinstance(model[0], QuantLinear) and model[0].perm is not None
    x = torch.randn(64, 40)
    with torch.no_grad():
        error = float((model(x) - reference(x)).norm() / reference(x).norm())
    assert error < 0.15  # W4 with per-token A8: the transform itself is exact (test_quant_math)

    np.savez(tmp_path / pack_file_name("bad"), weight_scale=np.array([object()], dtype=object))
    bad = torch.nn.Module()
    bad.add_module("bad", torch.nn.Linear(8, 1))
    with pytest.raises(ValueError, match="without pickles"):
        import_pi0_packs(bad, tmp_path)


def test_recorded_observations_calibrate_and_malformed_ones_are_refused(tmp_path):
    from controller.errors import ConfigError
    from controller.tools.quantize import quantize_checkpoint

    fp32 = small_act_policy()
    save_checkpoint(tmp_path / "fp32", fp32)
    images, state = stacked_observations(fp32.spec, 5, seed=1)
    np.savez(tmp_path / "obs.npz", images=images, state=state)
    report = quantize_checkpoint(
        tmp_path / "fp32", tmp_path / "q", 3, SETTINGS, recorded=tmp_path / "obs.npz"
    )
    config = json.loads((report.directory / "config.json").read_text())
    assert config["quantization"]["observations"] == 3 and report.layers == 16
    np.savez(tmp_path / "bad.npz", images=images, state=state[:, :, :4])
    with pytest.raises(ConfigError, match="state must be"):
        quantize_checkpoint(
            tmp_path / "fp32", tmp_path / "q2", 3, SETTINGS, recorded=tmp_path / "bad.npz"
        )
