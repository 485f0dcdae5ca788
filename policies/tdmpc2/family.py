"""The tdmpc2 family: TD-MPC2 agents (a world model planned with MPPI, or its policy prior in
fast mode), from Tempo checkpoints or official .pt files (`tempo checkpoint import-tdmpc2`),
served with the `policy.tdmpc2` settings (`policy.planner` before).

Standard library only at import (see policies.registry); each part imports what it needs when
it is used.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from controller.errors import ConfigError
from policies.registry import (
    CheckpointFamily,
    DemoPolicy,
    FallbackPolicy,
    FamilySettings,
    ImportCommand,
    PolicyFamily,
)

if TYPE_CHECKING:
    from policies.settings import PolicySettings
    from policies.tdmpc2.settings import PlannerSettings
    from policies.tensor_policy import TensorPolicy


def _planner_model() -> type[PlannerSettings]:
    from policies.tdmpc2.settings import PlannerSettings

    return PlannerSettings


PLANNER_SETTINGS = FamilySettings(section="tdmpc2", model=_planner_model, old_section="planner")


def _checkpoint() -> CheckpointFamily:
    from policies.tdmpc2.checkpoint import CHECKPOINT

    return CHECKPOINT


def serve_planner_settings(policy: TensorPolicy, settings: PolicySettings) -> TensorPolicy:
    """`policy` planning as policy.tdmpc2 says (unchanged at its defaults); planner settings
    for a policy that is not a TD-MPC2 agent are refused."""
    planner = settings.section("tdmpc2")
    changed = planner.mode != "checkpoint" or planner.compute != "checkpoint"
    changed = changed or planner.prior_steps is not None
    if not changed and planner.fallback_budget_ms is None:
        return policy
    from pydantic import ValidationError

    from policies.tdmpc2.serving import with_compute, with_mode, with_prior_steps

    try:
        if planner.compute != "checkpoint":
            policy = with_compute(policy, planner.compute)
        if planner.prior_steps is not None:
            policy = with_prior_steps(policy, planner.prior_steps)
        if planner.mode != "checkpoint":
            policy = with_mode(policy, planner.mode)
        elif planner.fallback_budget_ms is not None:
            with_mode(policy, "prior")  # refuse a fallback for a policy without a prior
    except ValidationError as exc:  # the agent's config refuses a setting (prior_steps)
        raise ConfigError(f"policy.tdmpc2: {exc.errors()[0]['msg']}") from None
    except ValueError:
        raise ConfigError(
            f"policy.tdmpc2 applies to TD-MPC2 checkpoints; {settings.path} holds another "
            "policy (leave policy.tdmpc2 at its defaults)"
        ) from None
    return policy


def prior_fallback(policy: TensorPolicy, settings: PolicySettings) -> FallbackPolicy | None:
    """The policy prior (fast mode) over `policy`'s weights, served when planning overruns
    policy.tdmpc2.fallback_budget_ms; None when no budget is set."""
    planner = settings.section("tdmpc2")
    if planner.fallback_budget_ms is None:
        return None
    from policies.tdmpc2.serving import with_mode

    try:
        prior = with_mode(policy, "prior")
    except ValueError:
        raise ConfigError(
            "policy.tdmpc2.fallback_budget_ms applies to TD-MPC2 agents; this policy has no "
            "prior to fall back to"
        ) from None
    budget_s = planner.fallback_budget_ms / 1e3
    return FallbackPolicy(prior, budget_s, planner.fallback_k, planner.fallback_n)


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    """`tempo checkpoint import-tdmpc2`'s arguments."""
    parser.add_argument("source", type=Path, help="the official agent's .pt file")
    parser.add_argument("destination", type=Path, help="directory for the Tempo checkpoint")
    parser.add_argument("--obs-dim", type=int, required=True, help="state observation length")
    parser.add_argument("--action-dim", type=int, required=True, help="action length")
    parser.add_argument(
        "--config",
        type=Path,
        help="the official config.yaml the agent was trained with: model size, planner "
        "settings and discount are taken from it as the official code derives them; the "
        "flags below override it",
    )
    parser.add_argument(
        "--model-size", type=int, choices=[1, 5, 19, 48, 317], help="default 5 (or --config's)"
    )
    parser.add_argument("--horizon", type=int, help="planning horizon (default 3)")
    parser.add_argument(
        "--iterations", type=int, help="MPPI iterations (default 6; 8 if >= 20 actions)"
    )
    parser.add_argument("--mode", choices=["plan", "prior"], help="prior: fast mode")
    parser.add_argument(
        "--episode-length",
        type=int,
        help="agent steps per episode (DMControl: 500, its 1000 steps at action repeat 2); the "
        "discount is derived from it as the official code does",
    )
    parser.add_argument(
        "--discount", type=float, help="per-step discount, instead of --episode-length's"
    )
    parser.add_argument("--action-low", help="robot value of action -1, comma-separated")
    parser.add_argument("--action-high", help="robot value of action +1, comma-separated")
    parser.add_argument("--joint-names", help="comma-separated (default joint_0, ...)")


def _floats(text: str | None, option: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"{option} {text!r}: expected comma-separated numbers") from None


def official_discount(episode_length: int) -> float:
    """The official code's discount for an episode of `episode_length` agent steps:
    clip((L/5 - 1) / (L/5), 0.95, 0.995) (its config's discount_denom, _min and _max)."""
    from policies.tdmpc2.official_config import official_discount as derive

    return derive(episode_length)


def planner_settings(args: argparse.Namespace) -> dict[str, object]:
    """The TDMPC2Config settings `import-tdmpc2` imports with: --config's (derived as the
    official code does), then each flag given. Without a discount from --discount,
    --episode-length or the file's episode_length the import is refused: a default would differ
    from what the official planner used for most tasks."""
    settings: dict[str, object] = {}
    if args.config is not None:
        from policies.tdmpc2.official_config import read_official_config, settings_from_config

        official = read_official_config(args.config)
        if official.get("action_dim", args.action_dim) != args.action_dim:
            raise ConfigError(
                f"--config {args.config} has action_dim {official['action_dim']} but "
                f"--action-dim is {args.action_dim}; they must agree"
            )
        settings = settings_from_config(official, args.action_dim, args.episode_length, args.config)
    elif args.episode_length is not None:
        settings["discount"] = official_discount(args.episode_length)
    for name, value in (
        ("model_size", args.model_size),
        ("horizon", args.horizon),
        ("iterations", args.iterations),
        ("mode", args.mode),
        ("discount", args.discount),
        ("action_low", _floats(args.action_low, "--action-low")),
        ("action_high", _floats(args.action_high, "--action-high")),
    ):
        if value is not None:
            settings[name] = value
    if "discount" not in settings:
        raise ConfigError(
            "import-tdmpc2 needs --episode-length (agent steps per episode: 500 for DMControl), "
            "--discount, or a --config with episode_length: the official code derives the "
            "discount from the episode length, and no single default matches every task"
        )
    settings.setdefault("model_size", 5)
    _check_planner(settings, args)
    return settings


def _check_planner(settings: dict[str, object], args: argparse.Namespace) -> None:
    """Refuse invalid settings now, in one sentence naming the field, before reading weights."""
    from pydantic import ValidationError

    from policies.tdmpc2.config import TDMPC2Config

    try:
        TDMPC2Config.model_validate(
            {"obs_dim": args.obs_dim, "action_dim": args.action_dim, **settings}
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["loc"]:  # one field: name it and its value
            field = ".".join(str(p) for p in error["loc"])
            message = f"{field} {error.get('input')!r}: {message}"
        source = f" (from --config {args.config} or the flags)" if args.config else ""
        raise ConfigError(f"import-tdmpc2{source}: {message}") from None


def run_import(args: argparse.Namespace) -> int:
    """`tempo checkpoint import-tdmpc2 SOURCE DESTINATION --obs-dim N --action-dim M ...`."""
    from policies.tdmpc2.official import import_official

    planner = planner_settings(args)
    model_size = int(planner.pop("model_size"))  # type: ignore[call-overload]
    joint_names = tuple(args.joint_names.split(",")) if args.joint_names else None
    written, layout = import_official(
        args.source,
        args.destination,
        obs_dim=args.obs_dim,
        action_dim=args.action_dim,
        model_size=model_size,
        joint_names=joint_names,
        **planner,
    )
    print(
        f"wrote a Tempo checkpoint to {written} (official {layout} key layout); serve it with "
        f"`tempo serve --set policy.kind=checkpoint --set policy.path={written} "
        "--set execution.ensemble=newest`"
    )
    return 0


def demo_settings(cache: Path) -> list[str]:
    """`tempo demo --policy tdmpc2`: a 1M agent with random weights (written on the first run)
    on the arm's joint state; a plan's rows are the planned steps, so the newest plan plays."""
    directory = cache / "demo-tdmpc2"
    if not (directory / "config.json").exists():
        from policies.tdmpc2.demo import make_demo_tdmpc2_checkpoint

        make_demo_tdmpc2_checkpoint(directory)
    return ["policy.kind=checkpoint", f"policy.path={directory}", "execution.ensemble=newest"]


FAMILY = PolicyFamily(
    name="tdmpc2",
    title="TD-MPC2",
    summary="TD-MPC2 agents: MPPI planning over a learned world model, or its prior (fast mode)",
    checkpoint=_checkpoint,
    serve_settings=serve_planner_settings,
    settings=(PLANNER_SETTINGS,),
    fallback=prior_fallback,
    import_commands=(
        ImportCommand(
            name="import-tdmpc2",
            help="convert an official TD-MPC2 .pt file to Tempo's format",
            add_arguments=add_import_arguments,
            run=run_import,
        ),
    ),
    demo=DemoPolicy(
        help="a TD-MPC2 planner (1M, random weights) on the arm's joint state",
        settings=demo_settings,
    ),
)
