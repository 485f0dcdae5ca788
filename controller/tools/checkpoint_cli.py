"""`tempo checkpoint inspect | import-lerobot | import-tdmpc2` and `tempo quantize`: the
commands that read, convert and quantize checkpoints.

Only the standard library at import time (the `tempo` parser is built on a driver's install
too); each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.errors import ConfigError


def add_checkpoint_parsers(sub: Any, setup_logging: Callable[[str], None]) -> None:
    """Add `checkpoint` and `quantize` to the `tempo` subparsers (setup_logging: the CLI's)."""
    checkpoint = sub.add_parser("checkpoint", help="inspect and import policy checkpoints")
    checkpoint_sub = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    inspect = checkpoint_sub.add_parser("inspect", help="print a checkpoint's spec and size")
    inspect.add_argument("directory", type=Path)
    inspect.set_defaults(func=cmd_checkpoint_inspect)
    convert = checkpoint_sub.add_parser(
        "import-lerobot", help="convert a LeRobot ACT directory to Tempo's format"
    )
    convert.add_argument("source", type=Path)
    convert.add_argument("destination", type=Path)
    convert.add_argument(
        "--joint-names",
        help="comma-separated joint names (LeRobot configs carry none; default joint_0, ...)",
    )
    convert.add_argument(
        "--allow-unknown-options",
        action="store_true",
        help="accept LeRobot config options Tempo does not know (they are listed)",
    )
    convert.set_defaults(func=cmd_checkpoint_import)
    tdmpc2 = checkpoint_sub.add_parser(
        "import-tdmpc2", help="convert an official TD-MPC2 .pt file to Tempo's format"
    )
    tdmpc2.add_argument("source", type=Path, help="the official agent's .pt file")
    tdmpc2.add_argument("destination", type=Path)
    tdmpc2.add_argument("--obs-dim", type=int, required=True, help="state observation length")
    tdmpc2.add_argument("--action-dim", type=int, required=True, help="action length")
    tdmpc2.add_argument(
        "--model-size", type=int, default=5, choices=[1, 5, 19, 48, 317], help="default 5"
    )
    tdmpc2.add_argument("--horizon", type=int, help="planning horizon (default 3)")
    tdmpc2.add_argument(
        "--iterations", type=int, help="MPPI iterations (default 6; 8 if >= 20 actions)"
    )
    tdmpc2.add_argument("--mode", choices=["plan", "prior"], help="prior: fast mode")
    tdmpc2.add_argument("--discount", type=float, help="per-step discount (default 0.995)")
    tdmpc2.add_argument("--action-low", help="robot value of action -1, comma-separated")
    tdmpc2.add_argument("--action-high", help="robot value of action +1, comma-separated")
    tdmpc2.add_argument("--joint-names", help="comma-separated (default joint_0, ...)")
    tdmpc2.set_defaults(func=cmd_checkpoint_import_tdmpc2)

    quantize = sub.add_parser(
        "quantize", help="calibrate a checkpoint and write it with W4A8 (DuQuant) layers"
    )
    quantize.add_argument("checkpoint", type=Path, help="FP32 checkpoint (Tempo or LeRobot ACT)")
    quantize.add_argument("out", type=Path, help="directory for the quantized checkpoint")
    quantize.add_argument("--observations", type=int, default=32, help="calibration observations")
    quantize.add_argument(
        "--recorded",
        type=Path,
        help=".npz of recorded observations (images, state) to "
        "calibrate on instead of ones synthesized from the spec",
    )
    quantize.add_argument(
        "--pi0-packs",
        type=Path,
        help="take the transforms from the pi0 DuQuant port's "
        "per-layer .npz packs in this directory instead of calibrating them",
    )
    quantize.add_argument("--method", choices=["duquant", "rtn"], default="duquant")
    quantize.add_argument(
        "--layers", choices=["transformer", "transformer+head"], default="transformer"
    )
    quantize.add_argument("--block-size", type=int, default=32, help="rotation block, 16-128")
    quantize.add_argument("--activations", choices=["static", "dynamic"], default="static")
    quantize.add_argument(
        "--compiled-path",
        choices=["int8", "dequant"],
        default="int8",
        help="what the compiled and graph tiers run (int8 GEMM or dequantized weights)",
    )
    quantize.add_argument(
        "--packed-weights", action="store_true", help="hold 4-bit codes two per byte in memory"
    )
    quantize.add_argument(
        "--reference-observations",
        type=int,
        default=4,
        help="observations whose FP32 chunks the checkpoint keeps for start-up parity",
    )
    quantize.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="cpu", help="where the model runs"
    )
    quantize.add_argument(
        "--log-level", default=None, choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    quantize.set_defaults(func=lambda args: _quantize(args, setup_logging))


def cmd_checkpoint_inspect(args: argparse.Namespace) -> int:
    from policies.checkpoints.load import describe_checkpoint

    problems: list[str] = []
    print(describe_checkpoint(args.directory, problems))
    for problem in problems:  # described, but it cannot be served: say so in the exit code
        print(f"tempo: {problem}", file=sys.stderr)
    return 1 if problems else 0


def cmd_checkpoint_import(args: argparse.Namespace) -> int:
    from policies.checkpoints.lerobot import import_lerobot

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


def _floats(text: str | None, option: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"{option} {text!r}: expected comma-separated numbers") from None


def cmd_checkpoint_import_tdmpc2(args: argparse.Namespace) -> int:
    from policies.checkpoints.tdmpc2 import import_official

    planner = {
        name: value
        for name, value in (
            ("horizon", args.horizon),
            ("iterations", args.iterations),
            ("mode", args.mode),
            ("discount", args.discount),
            ("action_low", _floats(args.action_low, "--action-low")),
            ("action_high", _floats(args.action_high, "--action-high")),
        )
        if value is not None
    }
    joint_names = tuple(args.joint_names.split(",")) if args.joint_names else None
    written, layout = import_official(
        args.source,
        args.destination,
        obs_dim=args.obs_dim,
        action_dim=args.action_dim,
        model_size=args.model_size,
        joint_names=joint_names,
        **planner,
    )
    print(
        f"wrote a Tempo checkpoint to {written} (official {layout} key layout); serve it with "
        f"`tempo serve --set policy.kind=checkpoint --set policy.path={written} "
        "--set inference.ensemble=newest`"
    )
    return 0


def _quantize(args: argparse.Namespace, setup_logging: Callable[[str], None]) -> int:
    setup_logging(args.log_level or "WARNING")
    from pydantic import ValidationError

    from controller.inference.build import resolve_device
    from controller.tools.quantize import quantize_checkpoint
    from policies.quant.config import QuantSettings

    try:
        settings = QuantSettings(
            method=args.method,
            layers=args.layers,
            block_size=args.block_size,
            activations=args.activations,
            compiled_path=args.compiled_path,
            packed_weights=args.packed_weights,
        )
    except ValidationError as exc:
        raise ConfigError(f"tempo quantize: {exc.errors()[0]['msg']}") from None
    report = quantize_checkpoint(
        args.checkpoint,
        args.out,
        args.observations,
        settings,
        reference_observations=args.reference_observations,
        recorded=args.recorded,
        pi0_packs=args.pi0_packs,
        device=resolve_device(args.device, setting="--device"),
        progress=print,
    )
    print("\n".join(report.lines()))
    return 0
