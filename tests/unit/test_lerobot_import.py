"""LeRobot ACT directories (both normalization layouts) load into Tempo and compute the same.

The directories are written here the way LeRobot writes them (file names, JSON layout, tensor
names), from a Tempo ACT whose outputs are the reference. scripts/parity/check_lerobot_parity.py
checks the same against LeRobot itself where LeRobot is installed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from controller.errors import CheckpointError
from policies.act.config import ACTConfig
from policies.act.lerobot import import_lerobot, read_lerobot_act
from policies.act.model import ACT
from policies.checkpoints.load import describe_checkpoint, load_checkpoint

NORM_PREFIXES = ("image_norm.", "state_norm.", "env_state_norm.", "action_norm.")
CAMERAS = ("observation.images.front", "observation.images.wrist")


def tempo_model(**overrides: Any) -> ACT:
    values: dict[str, Any] = dict(
        n_cameras=2, image_height=32, image_width=32, state_dim=3, action_dim=3, chunk_size=4,
        dim_model=16, n_heads=2, dim_feedforward=32, n_encoder_layers=1, latent_dim=4,
        use_vae=True, n_vae_encoder_layers=1, n_action_steps=4,
    )  # fmt: skip
    values.update(overrides)
    torch.manual_seed(0)
    module = ACT(ACTConfig.model_validate(values)).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            if name.startswith(NORM_PREFIXES):
                low = name.endswith(("mean", "min"))
                buffer.copy_(torch.rand(buffer.shape, generator=gen) * 0.5 + (0.1 if low else 0.8))
    return module


def lerobot_config(module: ACT, mapping: dict[str, str]) -> dict[str, Any]:
    """config.json as LeRobot 0.4 writes it (draccus dump of ACTConfig)."""
    c = module.config
    inputs: dict[str, Any] = {
        key: {"type": "VISUAL", "shape": [3, *size]}
        for key, size in zip(CAMERAS[: c.n_cameras], c.frame_sizes, strict=True)
    }
    inputs["observation.state"] = {"type": "STATE", "shape": [c.state_dim]}
    if c.env_state_dim:
        inputs["observation.environment_state"] = {"type": "ENV", "shape": [c.env_state_dim]}
    return {
        "type": "act", "n_obs_steps": 1, "input_features": inputs,
        "output_features": {"action": {"type": "ACTION", "shape": [c.action_dim]}},
        "device": "cuda", "use_amp": False, "use_peft": False, "push_to_hub": True,
        "repo_id": None, "private": None, "tags": None, "license": None,
        "pretrained_path": None, "chunk_size": c.chunk_size, "n_action_steps": c.n_action_steps,
        "normalization_mapping": mapping, "vision_backbone": c.vision_backbone,
        "pretrained_backbone_weights": "ResNet18_Weights.IMAGENET1K_V1",
        "replace_final_stride_with_dilation": False, "pre_norm": c.pre_norm,
        "dim_model": c.dim_model, "n_heads": c.n_heads, "dim_feedforward": c.dim_feedforward,
        "feedforward_activation": c.feedforward_activation,
        "n_encoder_layers": c.n_encoder_layers, "n_decoder_layers": c.n_decoder_layers,
        "use_vae": c.use_vae, "latent_dim": c.latent_dim,
        "n_vae_encoder_layers": c.n_vae_encoder_layers, "temporal_ensemble_coeff": None,
        "dropout": 0.1, "kl_weight": 10.0, "optimizer_lr": 1e-05,
        "optimizer_weight_decay": 0.0001, "optimizer_lr_backbone": 1e-05,
    }  # fmt: skip


StatNames = dict[str, tuple[tuple[str, ...], tuple[str, ...]]]


def lerobot_stats(module: ACT, names: StatNames) -> dict[str, torch.Tensor]:
    """Per-feature statistics keyed `<feature>.<stat>`; `names[feature]` pairs Tempo's stat names
    with LeRobot's (min_max may be stored as q01/q99). A feature left out of `names` gets no
    statistics; a `count` is added, as LeRobot saves every statistic it has."""
    c = module.config
    out: dict[str, torch.Tensor] = {}
    groups = [("observation.state", module.state_norm), ("action", module.action_norm)]
    if c.env_state_dim:
        groups.append(("observation.environment_state", module.env_state_norm))
    for key, norm in groups:
        tempo_names, lerobot_names = names.get(key, ((), ()))
        for tempo_name, lerobot_name in zip(tempo_names, lerobot_names, strict=True):
            out[f"{key}.{lerobot_name}"] = getattr(norm, tempo_name).clone()
        out[f"{key}.count"] = torch.tensor([100.0])
    for i, key in enumerate(CAMERAS[: c.n_cameras]):
        tempo_names, lerobot_names = names.get("images", ((), ()))
        for tempo_name, lerobot_name in zip(tempo_names, lerobot_names, strict=True):
            out[f"{key}.{lerobot_name}"] = getattr(module.image_norm, tempo_name)[i].view(3, 1, 1)
    return out


def weights(module: ACT) -> dict[str, torch.Tensor]:
    return {
        f"model.{k}": v.clone()
        for k, v in module.state_dict().items()
        if not k.startswith(NORM_PREFIXES)
    }


def write_processor_layout(
    directory: Path, module: ACT, mapping: dict[str, str], names: StatNames
) -> Path:
    directory.mkdir(parents=True)
    config = lerobot_config(module, mapping)
    (directory / "config.json").write_text(json.dumps(config, indent=4))
    save_file(weights(module), str(directory / "model.safetensors"))
    stats = lerobot_stats(module, names)
    pre_state = "policy_preprocessor_step_3_normalizer_processor.safetensors"
    post_state = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    save_file(stats, str(directory / pre_state))
    save_file({k: v.clone() for k, v in stats.items()}, str(directory / post_state))
    features = {**config["input_features"], **config["output_features"]}
    device = {
        "registry_name": "device_processor",
        "config": {"device": "cuda", "float_dtype": None},
    }
    pre = {"name": "policy_preprocessor", "steps": [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        device,
        {"registry_name": "normalizer_processor",
         "config": {"eps": 1e-08, "features": features, "norm_map": mapping},
         "state_file": pre_state},
    ]}  # fmt: skip
    post = {"name": "policy_postprocessor", "steps": [
        {"registry_name": "unnormalizer_processor",
         "config": {"eps": 1e-08, "features": config["output_features"], "norm_map": mapping},
         "state_file": post_state},
        device,
    ]}  # fmt: skip
    (directory / "policy_preprocessor.json").write_text(json.dumps(pre, indent=2))
    (directory / "policy_postprocessor.json").write_text(json.dumps(post, indent=2))
    return directory


def write_buffer_layout(directory: Path, module: ACT, mapping: dict[str, str]) -> Path:
    """LeRobot < 0.4: statistics are buffers of the policy's Normalize modules."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(lerobot_config(module, mapping)))
    tensors = weights(module)
    names = {"mean_std": ("mean", "std"), "min_max": ("min", "max"), "identity": ()}
    for i, key in enumerate(CAMERAS[: module.config.n_cameras]):
        for stat in names[module.config.image_norm]:
            value = getattr(module.image_norm, stat)[i].view(3, 1, 1).clone()
            tensors[f"normalize_inputs.buffer_{key.replace('.', '_')}.{stat}"] = value
    for stat in names[module.config.state_norm]:
        value = getattr(module.state_norm, stat).clone()
        tensors[f"normalize_inputs.buffer_observation_state.{stat}"] = value
    for stat in names[module.config.action_norm]:
        value = getattr(module.action_norm, stat)
        tensors[f"normalize_targets.buffer_action.{stat}"] = value.clone()
        tensors[f"unnormalize_outputs.buffer_action.{stat}"] = value.clone()
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


MEAN_STD = {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
MEAN_STD_NAMES: StatNames = {
    key: (("mean", "std"), ("mean", "std")) for key in ("images", "observation.state", "action")
}


@pytest.fixture(scope="module")
def reference() -> ACT:
    return tempo_model()


@pytest.fixture(scope="module")
def processor_dir(reference: ACT, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lerobot")
    return write_processor_layout(root / "new", reference, MEAN_STD, MEAN_STD_NAMES)


def inputs(module: ACT, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Two samples: one uint8 frame tensor per camera shape, then the state."""
    gen = torch.Generator().manual_seed(seed)
    frames = [
        torch.randint(0, 256, (2, len(cams), *size, 3), dtype=torch.uint8, generator=gen)
        for size, cams in module.config.frame_groups
    ]
    return (*frames, torch.randn(2, 1, module.config.state_size, generator=gen))


@torch.no_grad()
def assert_same_outputs(loaded: ACT, reference: ACT) -> None:
    args = inputs(reference)
    torch.testing.assert_close(loaded(*args), reference(*args), rtol=0, atol=0)


def test_processor_layout_loads_and_matches(processor_dir: Path, reference: ACT) -> None:
    policy = load_checkpoint(processor_dir)
    assert policy.spec.camera_names == ("front", "wrist")
    assert policy.spec.joint_names == ("joint_0", "joint_1", "joint_2")
    assert policy.module.config.norm_eps == 1e-8
    assert policy.module.config.n_action_steps == 4
    assert_same_outputs(policy.module, reference)


def test_buffer_layout_loads_and_matches(tmp_path: Path) -> None:
    module = tempo_model(state_norm="min_max")
    mapping = {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ACTION": "MEAN_STD"}
    directory = write_buffer_layout(tmp_path / "old", module, mapping)
    imported = read_lerobot_act(directory)
    assert "buffers inside model.safetensors" in imported.layout
    assert any("normalize_targets" in note for note in imported.notes)
    assert imported.policy.module.config.state_norm == "min_max"
    assert_same_outputs(imported.policy.module, module)


def test_quantile_modes_and_environment_state(tmp_path: Path) -> None:
    module = tempo_model(
        n_cameras=1, env_state_dim=2, env_state_norm="mean_std", action_norm="min_max",
        image_norm="identity", use_vae=False,
    )  # fmt: skip
    mapping = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ENV": "MEAN_STD", "ACTION": "QUANTILES"}
    names: StatNames = {
        "observation.state": (("mean", "std"), ("mean", "std")),
        "observation.environment_state": (("mean", "std"), ("mean", "std")),
        "action": (("min", "max"), ("q01", "q99")),
    }
    directory = write_processor_layout(tmp_path / "q", module, mapping, names)
    policy = load_checkpoint(directory)
    assert policy.spec.state_size == 5
    assert policy.module.config.action_norm == "min_max"
    assert_same_outputs(policy.module, module)


def test_import_writes_a_tempo_checkpoint(
    processor_dir: Path, reference: ACT, tmp_path: Path
) -> None:
    joints = ("shoulder", "elbow", "gripper")
    dst = import_lerobot(processor_dir, tmp_path / "tempo", joint_names=joints)
    assert json.loads((dst / "config.json").read_text())["format"] == "tempo"
    policy = load_checkpoint(dst)
    assert policy.spec.joint_names == joints
    assert_same_outputs(policy.module, reference)


def test_import_refuses_to_overwrite_its_source(processor_dir: Path) -> None:
    with pytest.raises(CheckpointError, match="the LeRobot directory itself"):
        import_lerobot(processor_dir, processor_dir)


def test_describe_lerobot(processor_dir: Path) -> None:
    text = describe_checkpoint(processor_dir)
    assert "format: LeRobot ACT (processor files" in text
    assert "generated joint_0" in text
    assert "cameras (2): front 32x32, wrist 32x32" in text
    assert "VAE encoder kept" in text


# ---- Refusals -----------------------------------------------------------------------------


def variant(base: Path, tmp_path: Path) -> Path:
    """A copy of `base` whose small files can be edited (the weights are linked, not copied)."""
    copy = tmp_path / "variant"
    copy.mkdir()
    for item in base.iterdir():
        if item.name == "model.safetensors":
            os.symlink(item, copy / item.name)
        else:
            shutil.copy(item, copy / item.name)
    return copy


def edit_json(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def refusal(directory: Path, **kwargs: Any) -> str:
    with pytest.raises(CheckpointError) as info:
        read_lerobot_act(directory, **kwargs)
    return str(info.value)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d.update(type="diffusion"), "LeRobot 'diffusion' policy; Tempo imports"),
        (
            lambda d: d.update(vision_backbone="efficientnet_b0"),
            "'efficientnet_b0' is not supported",
        ),
        (lambda d: d.update(n_obs_steps=2), "n_obs_steps is 2"),
        (lambda d: d.update(feedforward_activation="glu"), "'glu' is not supported"),
        (
            lambda d: d.update(policy_action_contract="libero"),
            "does not know: policy_action_contract",
        ),
        (lambda d: d.update(input_shapes={}), "pre-2025 config layout"),
        (lambda d: d.update(n_heads=3), "dim_model (16) must be divisible by n_heads (3)"),
        (
            lambda d: d["input_features"].update(
                {"observation.audio": {"type": "AUDIO", "shape": [1, 16000]}}
            ),
            "input feature 'observation.audio' (AUDIO",
        ),
        (lambda d: d.update(dim_feedforward=64), "wrong shape"),
        (
            lambda d: d["output_features"].update({"reward": {"type": "REWARD", "shape": [1]}}),
            "output_features must be 'action' (with at most columns named 'action.*'",
        ),
    ],
)
def test_config_refusals(processor_dir: Path, tmp_path: Path, edit: Any, expected: str) -> None:
    directory = variant(processor_dir, tmp_path)
    edit_json(directory / "config.json", edit)
    assert expected in refusal(directory)


def test_cameras_of_different_shapes_load_and_match(tmp_path: Path) -> None:
    reference = tempo_model(camera_sizes=((32, 32), (40, 48)))
    directory = write_processor_layout(tmp_path / "mixed", reference, MEAN_STD, MEAN_STD_NAMES)
    policy = load_checkpoint(directory)
    assert [(c.name, c.height, c.width) for c in policy.spec.cameras] == [
        ("front", 32, 32),
        ("wrist", 40, 48),
    ]
    assert_same_outputs(policy.module, reference)
    assert "cameras (2): front 32x32, wrist 40x48" in describe_checkpoint(directory)


def test_unknown_options_can_be_allowed(processor_dir: Path, tmp_path: Path) -> None:
    directory = variant(processor_dir, tmp_path)
    edit_json(directory / "config.json", lambda d: d.update(compile_model=False))
    assert "compile_model" in refusal(directory)
    read_lerobot_act(directory, allow_unknown_options=True)


def test_processor_refusals(processor_dir: Path, tmp_path: Path) -> None:
    directory = variant(processor_dir, tmp_path)
    pre = directory / "policy_preprocessor.json"
    edit_json(pre, lambda d: d["steps"].insert(1, {"registry_name": "delta_action_processor"}))
    assert "pipeline step 'delta_action_processor' is not supported" in refusal(directory)
    shutil.copy(processor_dir / pre.name, pre)
    edit_json(pre, lambda d: d["steps"][3]["config"]["norm_map"].update(STATE="WEIRD"))
    assert "normalization mode 'WEIRD' for 'observation.state'" in refusal(directory)
    shutil.copy(processor_dir / pre.name, pre)
    (directory / "policy_preprocessor_step_3_normalizer_processor.safetensors").unlink()
    assert "normalizer_processor.safetensors is missing" in refusal(directory)


def test_missing_statistic(processor_dir: Path, tmp_path: Path) -> None:
    directory = variant(processor_dir, tmp_path)
    state_file = directory / "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    save_file({"action.mean": torch.zeros(3)}, str(state_file))
    assert "'action' needs its 'std' statistic" in refusal(directory)


def test_wrong_joint_count(processor_dir: Path) -> None:
    assert "2 joint names were given" in refusal(processor_dir, joint_names=("a", "b"))


def test_truncated_weights(processor_dir: Path, tmp_path: Path) -> None:
    directory = variant(processor_dir, tmp_path)
    data = (processor_dir / "model.safetensors").read_bytes()
    (directory / "model.safetensors").unlink()
    (directory / "model.safetensors").write_bytes(data[:1000])
    assert "not a readable safetensors file" in refusal(directory)


def test_stray_buffer_in_old_layout(reference: ACT, tmp_path: Path) -> None:
    directory = write_buffer_layout(tmp_path / "old", reference, MEAN_STD)
    from safetensors.torch import load_file

    tensors = load_file(str(directory / "model.safetensors"))
    tensors["normalize_inputs.buffer_observation_images_top.mean"] = torch.zeros(3, 1, 1)
    save_file(tensors, str(directory / "model.safetensors"))
    assert "belongs to no feature of config.json" in refusal(directory)


# ---- Execution settings, joint names, training-run folders ----------------------------------


def test_execution_follows_the_lerobot_config(processor_dir: Path, tmp_path: Path) -> None:
    spec = read_lerobot_act(processor_dir).policy.spec
    assert spec.execution is not None
    assert (spec.execution.query_period, spec.execution.ensemble) == (4, "newest")
    assert "n_action_steps=4" in spec.execution.source
    ensembled = variant(processor_dir, tmp_path)
    edit_json(
        ensembled / "config.json",
        lambda c: c.update(n_action_steps=1, temporal_ensemble_coeff=0.01),
    )
    execution = read_lerobot_act(ensembled).policy.spec.execution
    assert execution is not None
    assert (execution.query_period, execution.ensemble, execution.temporal_k) == (
        1,
        "temporal",
        0.01,
    )
    assert "temporal ensembling k=0.01" in describe_checkpoint(ensembled)


def test_inspect_and_the_tempo_format_record_the_execution(
    processor_dir: Path, tmp_path: Path
) -> None:
    assert "execution: query every 4 step(s), play the newest chunk (from LeRobot" in (
        describe_checkpoint(processor_dir)
    )
    dst = import_lerobot(processor_dir, tmp_path / "tempo")
    saved = json.loads((dst / "config.json").read_text())
    assert saved["spec"]["execution"]["query_period"] == 4
    assert (
        load_checkpoint(dst).spec.execution == read_lerobot_act(processor_dir).policy.spec.execution
    )
    # A Tempo checkpoint written before the spec recorded it: the model's LeRobot values say it.
    edit_json(dst / "config.json", lambda c: c["spec"].pop("execution"))
    execution = load_checkpoint(dst).spec.execution
    assert execution is not None and execution.query_period == 4


def test_joint_names_from_dataset_metadata_next_to_the_checkpoint(
    processor_dir: Path, tmp_path: Path
) -> None:
    directory = variant(processor_dir, tmp_path)
    (directory / "meta").mkdir()
    info = {"features": {"action": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]}}}
    (directory / "meta" / "info.json").write_text(json.dumps(info))
    policy = load_checkpoint(directory)
    assert policy.spec.joint_names == ("x", "y", "z")
    assert "joint names from" in describe_checkpoint(directory)
    # policy.joint_names wins over the metadata
    assert load_checkpoint(directory, joint_names=["a", "b", "c"]).spec.joint_names == (
        "a",
        "b",
        "c",
    )
    info["features"]["action"]["names"] = ["x", "y"]
    (directory / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(CheckpointError, match="names 2 action entries.*policy.joint_names"):
        load_checkpoint(directory)


def test_joint_names_from_the_dataset_root_in_train_config(
    processor_dir: Path, tmp_path: Path
) -> None:
    directory = variant(processor_dir, tmp_path)
    root = tmp_path / "dataset"
    (root / "meta").mkdir(parents=True)
    names = {"motors": ["m0", "m1", "m2"]}  # older datasets nest the list
    info = {"features": {"action": {"shape": [3], "names": names}}}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (directory / "train_config.json").write_text(json.dumps({"dataset": {"root": str(root)}}))
    assert load_checkpoint(directory).spec.joint_names == ("m0", "m1", "m2")


def test_a_tempo_checkpoint_refuses_other_joint_names(processor_dir: Path, tmp_path: Path) -> None:
    dst = import_lerobot(processor_dir, tmp_path / "tempo", joint_names=["a", "b", "c"])
    assert load_checkpoint(dst, joint_names=["a", "b", "c"]).spec.joint_names == ("a", "b", "c")
    with pytest.raises(CheckpointError, match="differ from the names"):
        load_checkpoint(dst, joint_names=["x", "y", "z"])


def test_training_run_folders(processor_dir: Path, tmp_path: Path) -> None:
    """RUN/checkpoints/last/ holds pretrained_model/ (found); RUN itself is named, not guessed."""
    run = tmp_path / "run"
    last = run / "checkpoints" / "last"
    shutil.copytree(processor_dir, last / "pretrained_model")
    (last / "training_state").mkdir()
    assert load_checkpoint(last).spec.chunk_size == 4
    assert "format: LeRobot ACT" in describe_checkpoint(last)
    with pytest.raises(CheckpointError, match="training run.*checkpoints/last/pretrained_model"):
        load_checkpoint(run)


def test_action_columns_of_the_dataset_beside_action_are_not_outputs(
    processor_dir: Path, tmp_path: Path
) -> None:
    # LeRobot makes every action* column an ACTION output; a Tempo export has action.held.
    directory = variant(processor_dir, tmp_path)
    held = {"action.held": {"type": "ACTION", "shape": [1]}}
    edit_json(directory / "config.json", lambda d: d["output_features"].update(held))
    assert read_lerobot_act(directory).policy.spec.action_dim == 3
