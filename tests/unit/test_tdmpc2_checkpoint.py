"""Official TD-MPC2 checkpoints in both key layouts, built here from a random agent and saved as
the official agent saves them (a torch zip of {"model": state_dict}), imported without pickle
into Tempo's format, then served with the same plans as the agent they came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from controller.cli import main
from controller.errors import CheckpointError
from policies.checkpoints.load import describe_checkpoint, load_checkpoint
from policies.tdmpc2.official import import_official, read_official
from policies.tdmpc2.planner import TDMPC2Policy
from tests.unit.test_tdmpc2_planner import NO_FRAMES, small_config

Q_FIELDS = ("weight", "bias", "ln.weight", "ln.bias")


def official_state(
    policy: TDMPC2Policy, layout: str, integer_scalars: bool = False
) -> dict[str, object]:
    """The state dict the official WorldModel would have for these weights."""
    out: dict[str, object] = {}
    for name, tensor in policy.state_dict().items():
        name = name.removeprefix("model.")
        for ours, theirs in (
            ("encoder.", "_encoder.state."),
            ("dynamics.", "_dynamics."),
            ("reward.", "_reward."),
            ("termination.", "_termination."),
            ("pi.", "_pi."),
        ):
            if name.startswith(ours):
                out[theirs + name[len(ours) :]] = tensor.clone()
    for index, layer in enumerate(policy.model.qs.layers):
        fields = {"weight": layer.weight, "bias": layer.bias}
        if index < 2:
            fields |= {"ln.weight": layer.ln.weight, "ln.bias": layer.ln.bias}
        for field, value in fields.items():
            if layout == "current":
                for prefix in ("_Qs.params.", "_detach_Qs_params."):
                    out[f"{prefix}{index}.{field}"] = value.detach().clone()
                out[f"_target_Qs_params.{index}.{field}"] = torch.randn_like(value)
            else:
                number = 4 * index + Q_FIELDS.index(field)
                out[f"_Qs.params.{number}"] = value.detach().clone()
                out[f"_target_Qs.params.{number}"] = torch.randn_like(value)
    if layout == "current":
        for prefix in ("_Qs.params.", "_detach_Qs_params.", "_target_Qs_params."):
            out[prefix + "__batch_size"] = torch.Size([policy.config.num_q])
            out[prefix + "__device"] = torch.device("cpu")
        out["log_std_min"] = policy.model.log_std_min.clone()
        out["log_std_dif"] = policy.model.log_std_dif.clone()
        if integer_scalars:  # as TDMPC2.save writes them today: config.yaml's ints, int64
            for key in ("log_std_min", "log_std_dif"):
                value = out[key]
                assert isinstance(value, torch.Tensor) and value == value.round()
                out[key] = value.to(torch.int64)
    return out


def plan(policy: TDMPC2Policy) -> tuple[torch.Tensor, torch.Tensor]:
    c = policy.config
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        return policy(
            NO_FRAMES,
            torch.randn(1, c.obs_dim, generator=gen),
            torch.rand(1, c.horizon, c.action_dim, generator=gen),
            torch.zeros(1, 1),
            torch.ones(1, 1),
        )


@pytest.mark.parametrize("layout", ["current", "current-int64", "flat"])
@pytest.mark.parametrize("episodic", [False, True])
def test_both_layouts_import_and_plan_like_the_original(
    tmp_path: Path, layout: str, episodic: bool
) -> None:
    torch.manual_seed(0)
    original = TDMPC2Policy(small_config(episodic=episodic)).eval()
    c = original.config
    source = tmp_path / "agent.pt"
    integer_scalars = layout == "current-int64"
    layout = layout.removesuffix("-int64")
    torch.save({"model": official_state(original, layout, integer_scalars)}, source)
    planner = dict(
        num_samples=c.num_samples, num_pi_trajs=c.num_pi_trajs, num_elites=c.num_elites,
        iterations=c.iterations,
    )  # fmt: skip
    policy, found = read_official(
        source, obs_dim=c.obs_dim, action_dim=c.action_dim, model_size=1, **planner
    )
    assert found == layout
    assert policy.module.config.episodic is episodic
    for got, expected in zip(plan(policy.module), plan(original), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)

    written, _ = import_official(
        source, tmp_path / "tempo", obs_dim=c.obs_dim, action_dim=c.action_dim, model_size=1,
        **planner,
    )  # fmt: skip
    config = json.loads((written / "config.json").read_text())
    assert config["policy_type"] == "tdmpc2"
    loaded = load_checkpoint(written)
    assert loaded.spec.chunk_size == c.horizon and loaded.spec.cameras == ()
    for got, expected in zip(plan(loaded.module), plan(original), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert "policy type tdmpc2" in describe_checkpoint(written)


def test_cli_import_and_wrong_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = TDMPC2Policy(small_config(num_samples=512, num_pi_trajs=24, num_elites=64)).eval()
    source = tmp_path / "agent.pt"
    torch.save({"model": official_state(original, "current")}, source)
    dst = tmp_path / "tempo"
    args = ["checkpoint", "import-tdmpc2", str(source), str(dst), "--model-size", "1"]
    sizes = ["--obs-dim", "5", "--action-dim", "3"]
    assert main([*args, *sizes, "--horizon", "3", "--episode-length", "500"]) == 0
    assert "current key layout" in capsys.readouterr().out
    config = load_checkpoint(dst).module.config
    assert config.horizon == 3
    assert config.discount == pytest.approx(0.99)  # DMControl: 500 agent steps, as officially
    assert main([*args, "--obs-dim", "7", "--action-dim", "3", "--discount", "0.9"]) == 2
    assert "check --obs-dim" in capsys.readouterr().err
    # No silent default: without an episode length or a discount the import says what it needs.
    assert main([*args, *sizes]) == 2
    assert "--episode-length" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("length", "discount"), [(500, 0.99), (1000, 0.995), (100, 0.95), (50, 0.95), (200, 0.975)]
)
def test_the_discount_follows_the_official_heuristic(length: int, discount: float) -> None:
    from policies.tdmpc2.family import official_discount

    assert official_discount(length) == pytest.approx(discount)


def test_pickled_objects_are_refused(tmp_path: Path) -> None:
    class Payload:
        def __reduce__(self):  # would run on unpickling
            return (print, ("unpickled!",))

    source = tmp_path / "evil.pt"
    torch.save({"model": {"x": Payload()}}, source)
    with pytest.raises(CheckpointError, match="can read safely"):
        read_official(source, obs_dim=5, action_dim=3, model_size=1)


def test_multitask_is_refused(tmp_path: Path) -> None:
    state = official_state(TDMPC2Policy(small_config()), "current")
    state["_task_emb.weight"] = torch.zeros(30, 96)
    source = tmp_path / "mt.pt"
    torch.save({"model": state}, source)
    with pytest.raises(CheckpointError, match="multi-task"):
        read_official(source, obs_dim=5, action_dim=3, model_size=1)
