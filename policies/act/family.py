"""The act family: ACT (action chunking transformer) policies, from Tempo checkpoints,
quantized (W4A8) ones, and LeRobot ACT directories (`tempo checkpoint import-lerobot`).

Standard library only at import (see policies.registry); each part imports what it needs when
it is used.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from policies.registry import (
    BenchmarkPolicy,
    CheckpointFamily,
    DemoPolicy,
    ImportCommand,
    PolicyFamily,
)

if TYPE_CHECKING:
    from policies.tensor_policy import TensorPolicy


def _checkpoint() -> CheckpointFamily:
    from policies.act.checkpoint import CHECKPOINT

    return CHECKPOINT


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    """`tempo checkpoint import-lerobot`'s arguments."""
    parser.add_argument("source", type=Path, help="the LeRobot ACT directory (pretrained_model)")
    parser.add_argument("destination", type=Path, help="directory for the Tempo checkpoint")
    parser.add_argument(
        "--joint-names",
        help="comma-separated joint names (LeRobot configs carry none; default joint_0, ...)",
    )
    parser.add_argument(
        "--allow-unknown-options",
        action="store_true",
        help="accept LeRobot config options Tempo does not know (they are listed)",
    )


def run_import(args: argparse.Namespace) -> int:
    """`tempo checkpoint import-lerobot SOURCE DESTINATION`."""
    from policies.act.lerobot import import_lerobot

    joint_names = args.joint_names.split(",") if args.joint_names else None
    written = import_lerobot(
        args.source,
        args.destination,
        joint_names=joint_names,
        allow_unknown_options=args.allow_unknown_options,
    )
    print(
        f"wrote a Tempo checkpoint to {written}; serve it with "
        f"`tempo serve --set policy.kind=checkpoint --set policy.path={written}`"
    )
    return 0


def demo_settings(cache: Path) -> list[str]:
    """`tempo demo`'s default: the small ACT with random weights, written on the first run."""
    directory = cache / "demo-act"
    if not (directory / "config.json").exists():
        from policies.act.demo import make_demo_checkpoint

        make_demo_checkpoint(directory)
    return ["policy.kind=checkpoint", f"policy.path={directory}"]


def _demo_policy() -> TensorPolicy:
    from policies.act.demo import make_demo_policy

    return make_demo_policy()


def _aloha_policy() -> TensorPolicy:
    from policies.act.demo import make_aloha_policy

    return make_aloha_policy()


FAMILY = PolicyFamily(
    name="act",
    title="ACT",
    summary="ACT, the action chunking transformer (Tempo, quantized or LeRobot checkpoints)",
    checkpoint=_checkpoint,
    import_commands=(
        ImportCommand(
            name="import-lerobot",
            help="convert a LeRobot ACT directory to Tempo's format",
            add_arguments=add_import_arguments,
            run=run_import,
        ),
    ),
    demo=DemoPolicy(
        help="a small ACT with random weights, made on first run (default)",
        settings=demo_settings,
    ),
    benchmarks={
        "act-demo": BenchmarkPolicy(
            "the demo's small ACT (one 96x128 camera, 6 joints)", _demo_policy
        ),
        "act-aloha": BenchmarkPolicy("ACT, LeRobot ALOHA defaults, random weights", _aloha_policy),
    },
)
