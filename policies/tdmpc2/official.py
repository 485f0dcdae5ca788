"""Official TD-MPC2 checkpoints (nicklashansen/tdmpc2) read without unpickling arbitrary objects.

An official `.pt` file is a torch zip holding `{"model": state_dict}` (the agent's `save`). It is
read with `torch.load(weights_only=True)`, which rebuilds tensors and plain containers only
(torch.Size and torch.device included) and refuses every other object. Two key layouts exist:

    current (tensordict ensembles, after the torch.compile rework):
        _Qs.params.<layer>.<weight|bias|ln.weight|ln.bias>      stacked over heads (num_q, ...)
        _detach_Qs_params.<...>, _target_Qs_params.<...>       the same shapes (training only)
        _Qs.params.__batch_size, _Qs.params.__device, ...      tensordict metadata
        log_std_min, log_std_dif                               buffers
    flat (the published model zoo, functorch ensembles):
        _Qs.params.<n>                  n = 4 * layer + (weight, bias, ln.weight, ln.bias)
        _target_Qs.params.<n>           (training only)
        no log_std buffers (the config's -10 and 2 apply)

Both share `_encoder.state.<i>.*`, `_dynamics.*`, `_reward.*`, `_pi.*` and, for episodic tasks,
`_termination.*`. Renaming (official -> Tempo):

    _encoder.state.X -> model.encoder.X      _dynamics.X -> model.dynamics.X
    _reward.X -> model.reward.X              _termination.X -> model.termination.X
    _pi.X -> model.pi.X                      _Qs.params.<l>.<name> -> model.qs.layers.<l>.<name>
    log_std_min / log_std_dif -> model.log_std_min / model.log_std_dif

Target and detached Q copies are dropped (planning uses the online heads). Multi-task
checkpoints (`_task_emb`, `_action_masks`) and RGB encoders (`_encoder.rgb`) are refused.
"""

from __future__ import annotations

import logging
import pickle
import re
import zipfile
from pathlib import Path
from typing import Literal

import torch

from controller.errors import CheckpointError
from policies.checkpoints.tempo_format import load_weights, save_checkpoint
from policies.tdmpc2.config import TDMPC2Config, tdmpc2_spec
from policies.tdmpc2.planner import TDMPC2Policy
from policies.tdmpc2.serving import tdmpc2_policy
from policies.tensor_policy import TensorPolicy

logger = logging.getLogger(__name__)

Layout = Literal["current", "flat"]
_Q_FIELDS = ("weight", "bias", "ln.weight", "ln.bias")
_RENAMES = (
    ("_encoder.state.", "model.encoder."),
    ("_dynamics.", "model.dynamics."),
    ("_reward.", "model.reward."),
    ("_termination.", "model.termination."),
    ("_pi.", "model.pi."),
)
_DROPPED = ("_detach_Qs_params.", "_target_Qs_params.", "_target_Qs.", "_detach_Qs.", "_Qs.module.")
_CURRENT_Q = re.compile(r"^_Qs\.params\.(\d+)\.(weight|bias|ln\.weight|ln\.bias)$")
_FLAT_Q = re.compile(r"^_Qs\.params\.(\d+)$")


def load_official_state(path: str | Path) -> dict[str, object]:
    """The state dict of an official `.pt` file, read with weights_only=True."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist or is not a file; give an official .pt file")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, zipfile.BadZipFile, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path} is not a TD-MPC2 checkpoint Tempo can read safely ({first}); it must be a "
            "torch file of tensors, as the official agent's save() writes"
        ) from None
    state = raw.get("model", raw) if isinstance(raw, dict) else None
    if not isinstance(state, dict) or not state:
        raise CheckpointError(
            f'{path} holds no state dict (expected {{"model": state_dict}} or a state dict)'
        )
    return state


def detect_layout(state: dict[str, object], source: str) -> Layout:
    if any(k.startswith(("_task_emb.", "_action_masks")) for k in state):
        raise CheckpointError(
            f"{source} is a multi-task checkpoint (task embedding, action masks); Tempo imports "
            "single-task TD-MPC2 agents only"
        )
    if any(k.startswith("_encoder.rgb.") for k in state):
        raise CheckpointError(
            f"{source} has an RGB encoder; Tempo imports TD-MPC2 agents with state observations"
        )
    if any(_CURRENT_Q.match(k) for k in state):
        return "current"
    if any(_FLAT_Q.match(k) for k in state):
        return "flat"
    raise CheckpointError(f"{source} has no Q-ensemble (_Qs.params.*); it is not a TD-MPC2 agent")


def convert_state(state: dict[str, object], source: str) -> tuple[dict[str, torch.Tensor], Layout]:
    """Official keys -> Tempo's TDMPC2Policy keys (see the module docstring)."""
    layout = detect_layout(state, source)
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for key, value in state.items():
        if key.endswith(("__batch_size", "__device")) or key.startswith(_DROPPED):
            continue
        if not isinstance(value, torch.Tensor):
            unknown.append(key)
            continue
        if key in ("log_std_min", "log_std_dif"):
            # Today's official code makes these from config.yaml's integers (-10, 2): int64
            # scalars. Tempo's buffers are floating point; the values are exact either way.
            out[f"model.{key}"] = value if value.is_floating_point() else value.float()
            continue
        current, flat = _CURRENT_Q.match(key), _FLAT_Q.match(key)
        if layout == "current" and current:
            out[f"model.qs.layers.{current.group(1)}.{current.group(2)}"] = value
            continue
        if layout == "flat" and flat:
            number = int(flat.group(1))
            out[f"model.qs.layers.{number // 4}.{_Q_FIELDS[number % 4]}"] = value
            continue
        for old, new in _RENAMES:
            if key.startswith(old):
                out[new + key[len(old) :]] = value
                break
        else:
            unknown.append(key)
    if unknown:
        shown = ", ".join(unknown[:4]) + (
            f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        )
        raise CheckpointError(
            f"{source} has entries Tempo does not know for a TD-MPC2 agent: {shown}"
        )
    return out, layout


def read_official(
    path: str | Path,
    *,
    obs_dim: int,
    action_dim: int,
    model_size: int,
    joint_names: tuple[str, ...] | None = None,
    **planner: object,
) -> tuple[TensorPolicy, Layout]:
    """An official checkpoint as an FP32 TensorPolicy (planner settings from `planner`, e.g.
    horizon=5), and the key layout it was in. Episodic is detected from the weights."""
    source = str(path)
    tensors, layout = convert_state(load_official_state(path), source)
    values: dict[str, object] = {
        "obs_dim": obs_dim,
        "action_dim": action_dim,
        "model_size": model_size,
        "episodic": any(k.startswith("model.termination.") for k in tensors),
        **planner,
    }
    if "model.log_std_min" in tensors and "model.log_std_dif" in tensors:
        low = float(tensors["model.log_std_min"])
        values["log_std_min"] = low
        values["log_std_max"] = low + float(tensors["model.log_std_dif"])
    try:
        config = TDMPC2Config.model_validate(values)
    except Exception as exc:
        raise CheckpointError(f"TD-MPC2 settings for {source} are invalid: {exc}") from None
    with torch.no_grad():
        module = TDMPC2Policy(config)
    for name in ("model.log_std_min", "model.log_std_dif"):  # absent in the flat layout
        tensors.setdefault(name, module.state_dict()[name].clone())
    _check_fits(module, tensors, config, source)
    load_weights(module, tensors, Path(source))
    try:
        spec = tdmpc2_spec(config, joint_names)
    except ValueError as exc:
        raise CheckpointError(f"importing {source}: {exc}") from None
    return tdmpc2_policy(module.eval(), spec), layout


def _check_fits(
    module: TDMPC2Policy, tensors: dict[str, torch.Tensor], config: TDMPC2Config, source: str
) -> None:
    """Say which option is wrong when the weights have other shapes than the config."""
    expected = module.state_dict()
    wrong = [
        f"{name} {tuple(t.shape)} (expected {tuple(expected[name].shape)})"
        for name, t in tensors.items()
        if name in expected and t.shape != expected[name].shape
    ]
    if wrong:
        raise CheckpointError(
            f"{source} does not fit a TD-MPC2 agent of model size {config.model_size} with "
            f"obs_dim {config.obs_dim} and action_dim {config.action_dim} ({wrong[0]}); check "
            "--obs-dim, --action-dim and --model-size"
        )


def import_official(
    src: str | Path,
    dst: str | Path,
    *,
    obs_dim: int,
    action_dim: int,
    model_size: int,
    joint_names: tuple[str, ...] | None = None,
    **planner: object,
) -> tuple[Path, Layout]:
    """Convert an official checkpoint once into a Tempo checkpoint directory at `dst`."""
    policy, layout = read_official(
        src,
        obs_dim=obs_dim,
        action_dim=action_dim,
        model_size=model_size,
        joint_names=joint_names,
        **planner,
    )
    logger.info("import %s: %s key layout", src, layout)
    return save_checkpoint(dst, policy), layout
