"""`tempo build [--config FILE] [CHECKPOINT]`: compile, ahead of time, every compiled tier the
config asks for on this device, and keep the artefacts beside the checkpoint (its `tempo_build/`
folder; the compile cache's `built/` folder when the checkpoint's is not writable), so that
`tempo serve` loads them instead of tracing and compiling (controller.inference.built_artefacts).

The build is a start of the policy as the daemon starts it, parity checks included, with the
artefacts folder set: whatever is missing, foreign or corrupt there is built, and what is already
there is loaded and checked. Only the standard library at import time (the `tempo` parser is
built on a driver's install too).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.errors import ConfigError


def add_build_parser(
    sub: Any,
    add_config_args: Callable[..., None],
    setup_logging: Callable[[str], None],
    load_config: Callable[[argparse.Namespace], Any],
) -> None:
    """Add `build` to the `tempo` subparsers (the CLI's config options, logging and loader)."""
    parser = sub.add_parser(
        "build", help="compile a policy's tiers ahead of time so that serve starts in seconds"
    )
    add_config_args(parser)
    parser.add_argument(
        "policy_path",
        nargs="?",
        type=Path,
        metavar="CHECKPOINT",
        help="the checkpoint to build for (default: the config's policy.path)",
    )
    parser.add_argument(
        "--rebuild", action="store_true", help="build again even what is already built and valid"
    )

    parser.add_argument(
        "--policy", help="which of the config's `policies:` to build (needed when it has several)"
    )

    def run(args: argparse.Namespace) -> int:
        setup_logging(args.log_level or "INFO")
        return run_build(chosen_policy(load_config(args), args.policy), rebuild=args.rebuild)

    parser.set_defaults(func=run)


def chosen_policy(config: Any, name: str | None) -> Any:
    """The config as the policy `name` sees it (its own runner, inference and policy sections;
    None: the only one); ConfigError when several are served and none is named, or no such."""
    from controller.config import policy_views

    views = dict(policy_views(config))
    if name is None and len(views) > 1:
        listed = ", ".join(repr(n) for n in views)
        raise ConfigError(f"the config serves several policies ({listed}); name one with --policy")
    if name is not None and name not in views:
        listed = ", ".join(repr(n) for n in views)
        raise ConfigError(f"the config serves no policy named {name!r}; it serves {listed}")
    return views[name] if name is not None else next(iter(views.values()))


def run_build(config: Any, rebuild: bool = False) -> int:
    """Build (or check) the artefacts of `config`'s policy (a TempoConfig); exit code."""
    import torch

    from controller.inference.artefact_files import unusable_slots
    from controller.inference.artefact_folders import folder_to_build
    from controller.inference.artefact_identity import ArtefactRefused
    from controller.inference.build import build_policy, planner_runner, resolve_device
    from controller.inference.tier_checks import tier_names

    runner = config.runner
    if runner.built_artefacts == "off":
        raise ConfigError("runner.built_artefacts is off, so serve would not use what this builds")
    device = torch.device(resolve_device(config.policy.device))
    names = tier_names(device, runner, {})
    if not {"graph", "compiled"} & set(names):
        raise ConfigError(
            f"runner.top_tier ({runner.top_tier}) asks for no compiled tier on this device "
            f"({device.type}), so there is nothing to build; set runner.top_tier=compiled"
        )
    folder = folder_to_build(runner, config.policy)
    if rebuild:
        for stale in folder.glob("step-*"):
            try:
                stale.unlink()
            except OSError as exc:
                raise ArtefactRefused(
                    f"--rebuild cannot remove {stale} ({exc.strerror}); remove it by hand"
                ) from None
    began = time.perf_counter()
    policy = build_policy(
        config.policy,
        config.robot,
        runner.model_copy(update={"artefacts_dir": folder}),
        progress=None,
        batch_sizes=config.execution.batch_sizes,
    )
    served = planner_runner(policy)
    took = time.perf_counter() - began
    unusable = unusable_slots(folder)
    if unusable:  # left as it is, serve would refuse it and build again at every start
        manifest, why = unusable[0]
        more = f" (and {len(unusable) - 1} more)" if len(unusable) > 1 else ""
        raise ArtefactRefused(
            f"{manifest}{more} cannot be used by serve ({why}); remove it and run tempo build again"
        )
    packages = sorted(p.name for p in folder.glob("step-*.pt2"))
    print(
        f"built in {took:.1f} s into {folder}: {len(packages)} AOTInductor package(s); "
        f"serving tier {served.tier} (ready: {', '.join(served.ready_tiers)})"
    )
    sys.stdout.flush()
    return 0
