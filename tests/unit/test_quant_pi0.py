"""W4A8 pi0 and pi0.5 (tiny widths): `tempo quantize` -> a quantized Tempo checkpoint -> served,
with no quantization work at start-up; the compiled tier equal to the eager fake-quant model;
refusals of checkpoints whose quantized layers do not fit; the pi0 port's packs imported."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from controller.cli import main
from controller.errors import CheckpointError
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.checkpoints.load import describe_checkpoint, load_checkpoint
from policies.pi0.quantized import pi0_layers
from policies.quant.config import Quantization, QuantSettings
from policies.quant.layer import QuantLinear
from policies.quant.pi0_packs import pack_file_name

DATA = Path(__file__).resolve().parents[1] / "data"
TASK = "pick up the red cube"
EXPERT_UP = "paligemma_with_expert.gemma_expert.model.layers.0.mlp.up_proj"
LANGUAGE_Q = "paligemma_with_expert.paligemma.model.language_model.layers.1.self_attn.q_proj"


def _quantize(source: Path, out: Path, *extra: str) -> str:
    args = ["quantize", str(source), str(out), "--observations", "3", "--block-size", "16"]
    args += ["--reference-observations", "2", "--task", TASK, *extra]
    assert main(args) == 0
    return out.as_posix()


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """family -> (quantized directory, what `tempo quantize` printed), each made once."""
    made: dict[str, tuple[Path, str]] = {}

    def get(family: str) -> tuple[Path, str]:
        if family not in made:
            out = tmp_path_factory.mktemp(f"{family}_w4a8") / "ckpt"
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                _quantize(DATA / f"{family}_lerobot_tiny", out)
            made[family] = (out, printed.getvalue())
        return made[family]

    return get


def _stated_error(printed: str) -> float:
    found = re.search(r"against FP32: ([0-9.e+-]+)", printed)
    assert found, printed
    return float(found.group(1))


def _eager_runner(policy, rtol: float = 0.5) -> Runner:  # type: ignore[no-untyped-def]
    config = RunnerConfig(
        top_tier="eager_fp32",
        cache_dir=None,
        step_budget_ms=None,
        parity_observations=1,
        reference_parity_rtol=rtol,
    )
    runner = Runner(policy, config, device="cpu")
    runner.start()
    return runner


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_a_quantized_pi0_round_trips_and_serves_within_its_stated_error(quantized, family):
    directory, printed = quantized(family)
    stated = _stated_error(printed)
    # Tiny random widths lose a few percent to 4-bit weights; the figure is stated, and the
    # runner checks every tier against the FP32 chunks the checkpoint carries.
    assert 0.0 < stated < 0.2, printed

    fp32 = load_checkpoint(DATA / f"{family}_lerobot_tiny")
    policy = load_checkpoint(directory)
    settings = QuantSettings()
    expected = set(pi0_layers(fp32.module, settings))
    found = {n for n, m in policy.module.named_modules() if isinstance(m, QuantLinear)}
    assert found == expected and not any("vision_tower" in n for n in found)
    assert any(".mlp.down_proj" in n for n in found) and any("gemma_expert" in n for n in found)
    stored = load_file(str(directory / "model.safetensors"))
    assert all(stored[f"{n}.weight_packed"].dtype == torch.uint8 for n in found)
    assert not any(k.endswith(".weight") and k.rsplit(".", 1)[0] in found for k in stored)
    # The tokenizer travels with the checkpoint; the norm statistics are its buffers.
    assert policy.spec.prompt is not None
    assert Path(policy.spec.prompt.tokenizer) == (directory / "tokenizer/tokenizer.model").resolve()
    assert torch.equal(policy.module.state_norm.center, fp32.module.state_norm.center)
    assert policy.reference is not None and policy.reference.prompts is not None

    runner = _eager_runner(policy)
    (report,) = runner.status()["tiers"]  # type: ignore[misc]
    assert report["reference_error"] == pytest.approx(stated, rel=5e-3)
    assert "quantization: w4a8 duquant" in describe_checkpoint(directory)


def test_start_up_from_a_quantized_pi0_does_no_quantization_work(quantized, monkeypatch):
    directory, _ = quantized("pi0")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("start-up ran calibration or planning code")

    for where in (
        "policies.quant.apply.quantize_module",
        "policies.quant.apply.duquant_plan",
        "policies.quant.apply.identity_plan",
        "policies.quant.layer.quantize_weight",
        "policies.quant.duquant.greedy_block_rotation",
        "controller.tools.quantize.quantize_module",
        "controller.tools.quantize.import_pi0_packs",
    ):
        monkeypatch.setattr(where, refuse)
    monkeypatch.setattr(QuantLinear, "from_plan", refuse)
    monkeypatch.setattr(QuantLinear, "transformed_weight", refuse)
    runner = _eager_runner(load_checkpoint(directory))
    assert runner.ready_tiers == ["eager_fp32"]


@pytest.mark.parametrize("compiled_path", ["int8", "dequant"])
def test_the_compiled_tier_of_a_quantized_pi0_equals_eager_fake_quant(quantized, compiled_path):
    torch._dynamo.reset()
    policy = load_checkpoint(quantized("pi0")[0])
    layers = [m for m in policy.module.modules() if isinstance(m, QuantLinear)]
    for layer in layers:
        layer.compiled_path = compiled_path
    # The eager backend traces what inductor compiles (fullgraph: no break, no clone) in
    # seconds; QuantLinear takes its compiled path whenever it is traced.
    config = RunnerConfig(
        top_tier="compiled",
        serve_slower_tiers=True,
        compile_backend="eager",
        cache_dir=None,
        step_budget_ms=None,
        parity_observations=2,
        reference_parity_rtol=0.5,
    )
    runner = Runner(policy, config, device="cpu")
    runner.start()
    tiers = {t["name"]: t for t in runner.status()["tiers"]}  # type: ignore[union-attr]
    assert tiers["compiled"]["state"] == "ready", tiers
    # dequant in FP32 is the reference's arithmetic; int8 sums exact integers then scales,
    # which moves the FP32 rounding a little (measured 7.0e-4 after ten Euler steps).
    bound = 1e-6 if compiled_path == "dequant" else 3e-3
    assert tiers["compiled"]["parity_error"] <= bound, tiers["compiled"]


def _rewrite(directory: Path, edit) -> None:  # type: ignore[no-untyped-def]
    config = json.loads((directory / "config.json").read_text())
    edit(config)
    (directory / "config.json").write_text(json.dumps(config))


def test_a_quantized_pi0_whose_layers_do_not_fit_is_refused_naming_the_layer(quantized, tmp_path):
    source, _ = quantized("pi0")
    name = f"network.{LANGUAGE_Q}"

    shrunk = tmp_path / "layout"
    shutil.copytree(source, shrunk)
    _rewrite(shrunk, lambda c: c["quantization"]["layers"][name].update(in_features=48))
    with pytest.raises(CheckpointError, match=re.escape(name) + ".*64 to") as refused:
        load_checkpoint(shrunk)
    assert "\n" not in str(refused.value)

    missing = tmp_path / "missing"
    shutil.copytree(source, missing)
    absent = "network.paligemma_with_expert.paligemma.model.language_model.layers.7.mlp.up_proj"
    _rewrite(
        missing,
        lambda c: c["quantization"]["layers"].update({absent: c["quantization"]["layers"][name]}),
    )
    with pytest.raises(CheckpointError, match="has no layer .*layers.7.mlp.up_proj"):
        load_checkpoint(missing)

    cut = tmp_path / "codes"
    shutil.copytree(source, cut)
    tensors = load_file(str(cut / "model.safetensors"))
    key = f"{name}.weight_packed"
    tensors[key] = tensors[key][:, :-1].contiguous()
    save_file(tensors, str(cut / "model.safetensors"))
    with pytest.raises(CheckpointError, match=re.escape(key)):
        load_checkpoint(cut)


def _pack(directory: Path, name: str, in_features: int, out_features: int, seed: int) -> None:
    """A pack as the public pi0 DuQuant port writes one (block 16, a permutation, input and
    output rotations)."""
    gen = np.random.default_rng(seed)
    block = 16
    data: dict[str, np.ndarray] = {
        "weight_scale": np.ones(out_features, dtype=np.float32),
        "meta": np.array(
            json.dumps(
                {
                    "in_features": in_features,
                    "out_features": out_features,
                    "block_size": block,
                    "block_out_size": block,
                }
            )
        ),
        "perm": gen.permutation(in_features).astype(np.int64),
    }
    for prefix, size in (("Rin", in_features), ("Rout", out_features)):
        for b in range(size // block):
            rotation = np.linalg.qr(gen.standard_normal((block, block)))[0]
            data[f"{prefix}_{b}"] = rotation.astype(np.float32)
        data["R_in_blocks" if prefix == "Rin" else "R_out_blocks"] = np.arange(size // block)
    np.savez(directory / pack_file_name(name), **data)  # type: ignore[arg-type]


def test_the_pi0_ports_packs_import_onto_a_tiny_pi0_as_a_served_checkpoint(tmp_path, capsys):
    packs = tmp_path / "packs"
    packs.mkdir()
    _pack(packs, EXPERT_UP, 32, 64, seed=1)
    _pack(packs, LANGUAGE_Q, 64, 32, seed=2)
    out = tmp_path / "w4a8"
    _quantize(DATA / "pi0_lerobot_tiny", out, "--pi0-packs", str(packs))
    captured = capsys.readouterr()
    printed = captured.out
    assert "imported 2 DuQuant packs" in captured.err  # progress: stderr, the report: stdout

    record = Quantization.model_validate(
        json.loads((out / "config.json").read_text())["quantization"]
    )
    assert record.source == "pi0-duquant-packs" and record.settings.activations == "dynamic"
    assert set(record.layers) == {f"network.{EXPERT_UP}", f"network.{LANGUAGE_Q}"}
    assert record.layers[f"network.{EXPERT_UP}"].out_block == 16
    policy = load_checkpoint(out)
    layer = policy.module.get_submodule(f"network.{EXPERT_UP}")
    assert isinstance(layer, QuantLinear) and layer.perm is not None
    (report,) = _eager_runner(policy).status()["tiers"]  # type: ignore[misc]
    assert report["reference_error"] == pytest.approx(_stated_error(printed), rel=5e-3)


def test_a_replay_file_calibrates_a_pi0_and_a_missing_task_is_refused(tmp_path, capsys):
    from controller.tools.replay import save_replay

    source = DATA / "pi0_lerobot_tiny"
    spec = load_checkpoint(source).spec
    gen = np.random.default_rng(3)
    frames = {
        c.name: gen.integers(0, 256, (3, c.height, c.width, 3), dtype=np.uint8)
        for c in spec.cameras
    }
    replay = save_replay(tmp_path / "episode.npz", frames, gen.standard_normal((3, 14)))
    _quantize(source, tmp_path / "w4a8", "--recorded", str(replay))
    assert "calibrating on 3 recorded observations" in capsys.readouterr().err
    assert load_checkpoint(tmp_path / "w4a8").reference is not None

    code = main(["quantize", str(source), str(tmp_path / "none"), "--observations", "2"])
    assert code != 0
    message = capsys.readouterr().err
    assert "no default task" in message and "--task" in message and "Traceback" not in message
