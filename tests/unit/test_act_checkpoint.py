"""Tempo checkpoints: round trip, description, and refusal of broken directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from controller.errors import CheckpointError
from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.base import CameraSpec, PolicySpec
from policies.checkpoints.load import describe_checkpoint, load_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_demo_checkpoint
from policies.tensor_policy import EagerPolicy, TensorPolicy, example_inputs


def tiny_policy(seed: int = 0) -> TensorPolicy:
    config = ACTConfig(
        n_cameras=1,
        image_height=32,
        image_width=40,
        state_dim=3,
        action_dim=3,
        chunk_size=4,
        dim_model=16,
        n_heads=2,
        dim_feedforward=32,
        n_encoder_layers=1,
        latent_dim=4,
        state_input_mask=(True, True, False),
    )
    torch.manual_seed(seed)
    module = ACT(config).eval()
    with torch.no_grad():
        module.state_norm.mean.copy_(torch.tensor([0.1, -0.2, 0.3]))
        module.action_norm.std.copy_(torch.tensor([0.5, 2.0, 1.5]))
    spec = PolicySpec(
        cameras=(CameraSpec(name="wrist", height=32, width=40),),
        state_size=3,
        joint_names=("shoulder", "elbow", "wrist"),
        chunk_size=4,
    )
    return TensorPolicy(spec=spec, module=module)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[TensorPolicy, Path]:
    policy = tiny_policy()
    directory = save_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", policy)
    return policy, directory


@pytest.fixture
def copy_of(saved: tuple[TensorPolicy, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved[1], tmp_path / "copy"))


def edit_config(directory: Path, edit) -> None:  # type: ignore[no-untyped-def]
    path = directory / "config.json"
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def refused(directory: Path) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(directory)
    return str(info.value)


@torch.no_grad()
def test_round_trip_is_bit_exact(saved: tuple[TensorPolicy, Path]) -> None:
    policy, directory = saved
    loaded = load_checkpoint(directory)
    assert loaded.spec == policy.spec
    assert loaded.module.config == policy.module.config
    assert not loaded.module.training
    assert all(p.dtype == torch.float32 for p in loaded.module.state_dict().values())
    images, state = example_inputs(policy.spec, batch=2)
    assert torch.equal(loaded.module(images, state), policy.module(images, state))


def test_files_are_what_the_format_says(saved: tuple[TensorPolicy, Path]) -> None:
    _, directory = saved
    assert sorted(p.name for p in directory.iterdir()) == ["config.json", "model.safetensors"]
    document = json.loads((directory / "config.json").read_text())
    assert document["format"] == "tempo" and document["format_version"] == 1
    assert document["spec"]["joint_names"] == ["shoulder", "elbow", "wrist"]
    tensors = load_file(str(directory / "model.safetensors"))
    torch.testing.assert_close(tensors["state_norm.mean"], torch.tensor([0.1, -0.2, 0.3]))
    assert "image_norm.std" in tensors and "backbone.layer4.1.bn2.running_var" in tensors
    assert "image_pos_embed" not in tensors  # derived from the config, not stored


def test_describe(saved: tuple[TensorPolicy, Path]) -> None:
    text = describe_checkpoint(saved[1])
    for expected in (
        "Tempo checkpoint",
        "wrist 32x40",
        "joints (3): shoulder, elbow, wrist",
        "chunk size: 4",
        "resnet18",
        "1 hidden by the input mask",
        "values (parameters and buffers)",
    ):
        assert expected in text


def test_missing_directory_and_files(copy_of: Path, tmp_path: Path) -> None:
    assert "does not exist" in refused(tmp_path / "nowhere")
    (copy_of / "model.safetensors").unlink()
    assert "model.safetensors is missing" in refused(copy_of)
    (copy_of / "config.json").unlink()
    assert "config.json is missing" in refused(copy_of)


def test_unreadable_json(copy_of: Path) -> None:
    (copy_of / "config.json").write_text('{"format": "tempo",')
    assert "not valid JSON" in refused(copy_of)


def test_truncated_weights(copy_of: Path) -> None:
    path = copy_of / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    message = refused(copy_of)
    assert "model.safetensors is not a readable safetensors file" in message
    assert "truncated" in message


def test_missing_config_field(copy_of: Path) -> None:
    edit_config(copy_of, lambda d: d["model"].pop("chunk_size"))
    assert "field 'model.chunk_size' is missing" in refused(copy_of)


def test_unknown_config_field(copy_of: Path) -> None:
    edit_config(copy_of, lambda d: d["model"].update(dropout=0.1))
    assert "field 'model.dropout' is not a known option" in refused(copy_of)


def test_unsupported_backbone(copy_of: Path) -> None:
    edit_config(copy_of, lambda d: d["model"].update(vision_backbone="resnet9"))
    message = refused(copy_of)
    assert "model.vision_backbone" in message and "resnet18" in message


def test_cross_field_check_names_the_problem(copy_of: Path) -> None:
    edit_config(copy_of, lambda d: d["model"].update(n_heads=3))
    assert "divisible by n_heads" in refused(copy_of)


def test_spec_and_model_disagree(copy_of: Path) -> None:
    edit_config(copy_of, lambda d: d["spec"].update(chunk_size=9))
    assert "chunk_size 9 in spec, 4 in model" in refused(copy_of)


def test_wrong_shapes_are_named(copy_of: Path) -> None:
    edit_config(copy_of, lambda d: d["model"].update(dim_feedforward=64))
    message = refused(copy_of)
    assert "wrong shape" in message
    assert "encoder.layers.0.linear1.weight (32, 16) (expected (64, 16))" in message


def test_missing_and_unexpected_tensors(copy_of: Path) -> None:
    path = copy_of / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["action_head.bias"]
    tensors["extra.weight"] = torch.zeros(2)
    save_file(tensors, str(path))
    message = refused(copy_of)
    assert "missing 1 tensor(s): action_head.bias" in message
    assert "unexpected 1 tensor(s): extra.weight" in message


def test_non_finite_weights(copy_of: Path) -> None:
    path = copy_of / "model.safetensors"
    tensors = load_file(str(path))
    tensors["decoder.norm.weight"][3] = float("nan")
    save_file(tensors, str(path))
    message = refused(copy_of)
    assert "NaN or infinite" in message and "decoder.norm.weight" in message


def test_num_batches_tracked_tolerated(copy_of: Path, saved: tuple[TensorPolicy, Path]) -> None:
    path = copy_of / "model.safetensors"
    tensors = load_file(str(path))
    tensors["backbone.bn1.num_batches_tracked"] = torch.tensor(3)
    save_file(tensors, str(path))
    load_checkpoint(copy_of)


def test_other_formats_refused(copy_of: Path) -> None:
    edit_config(copy_of, lambda d: d.update(format_version=2))
    assert "format_version 2" in refused(copy_of)
    (copy_of / "config.json").write_text(json.dumps({"architectures": ["Bert"]}))
    assert "neither a Tempo checkpoint" in refused(copy_of)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo_checkpoint(tmp_path_factory.mktemp("demo") / "demo")


def test_demo_checkpoint_serves_reasonable_actions(demo: Path) -> None:
    policy = load_checkpoint(demo)
    assert policy.spec.camera_names == ("front",)
    assert policy.spec.cameras[0].shape == (96, 128, 3)
    assert policy.spec.joint_names == tuple(f"joint_{i}" for i in range(6))
    assert policy.spec.chunk_size == 20
    eager = EagerPolicy(policy)
    rng = np.random.default_rng(0)
    chunks = []
    for _ in range(3):
        frame = rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)
        state = rng.normal(0, 2, (1, 6)).astype(np.float32)
        chunk = eager.predict_chunk({"front": frame}, state)
        assert chunk.shape == (20, 6) and chunk.dtype == np.float32
        assert np.isfinite(chunk).all() and np.abs(chunk).max() <= 1.5
        chunks.append(chunk)
    assert not np.allclose(chunks[0], chunks[1])  # the output depends on the observation


def test_demo_is_deterministic(demo: Path, tmp_path: Path) -> None:
    again = make_demo_checkpoint(tmp_path / "again")
    first = load_file(str(demo / "model.safetensors"))
    second = load_file(str(again / "model.safetensors"))
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_demo_script(tmp_path: Path) -> None:
    import importlib.util

    script = Path(__file__).parents[2] / "scripts" / "make_demo_checkpoint.py"
    spec = importlib.util.spec_from_file_location("make_demo_checkpoint", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = [str(tmp_path / "cli"), "--camera", "top:64x64", "--camera", "side:64x64"]
    assert module.main([*argv, "--joints", "4", "--chunk-size", "8"]) == 0
    policy = load_checkpoint(tmp_path / "cli")
    assert policy.spec.camera_names == ("top", "side")
    assert policy.spec.action_dim == 4 and policy.spec.chunk_size == 8


def test_checkpoint_modules_import_each_other_without_a_cycle() -> None:
    """Every import in policies/checkpoints, lazy ones inside functions included, points one way."""
    import ast

    package = Path(__file__).parents[2] / "policies" / "checkpoints"
    modules = {path.stem: path for path in package.glob("*.py") if path.stem != "__init__"}
    imports: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("policies.checkpoints."):
                    found.add(target.split(".")[2])
        imports[name] = found & set(modules)
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name not in done:
            for target in sorted(imports[name]):
                visit(target, (*path, name))
            done.add(name)

    for name in sorted(modules):
        visit(name, ())
    assert imports["load"] >= {"files", "tempo_format"}  # the front door (families: registry)
