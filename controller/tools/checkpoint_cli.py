"""`tempo checkpoint inspect | import-lerobot | import-tdmpc2` and `tempo quantize`: the
commands that read, convert and quantize checkpoints. Each `import-*` command is a policy
family's (policies.registry: its name, arguments and handler).

Only the standard library at import time (the `tempo` parser is built on a driver's install
too; the registry and its families' declarations are standard library only as well); each
command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.errors import ConfigError
from policies.registry import families


def add_checkpoint_parsers(sub: Any, setup_logging: Callable[[str], None]) -> None:
    """Add `checkpoint` and `quantize` to the `tempo` subparsers (setup_logging: the CLI's)."""
    checkpoint = sub.add_parser("checkpoint", help="inspect and import policy checkpoints")
    checkpoint_sub = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    inspect = checkpoint_sub.add_parser("inspect", help="print a checkpoint's spec and size")
    inspect.add_argument("directory", type=Path, help="a Tempo or LeRobot checkpoint directory")
    inspect.set_defaults(func=cmd_checkpoint_inspect)
    for family in families():
        for command in family.import_commands:
            parser = checkpoint_sub.add_parser(command.name, help=command.help)
            command.add_arguments(parser)
            parser.set_defaults(func=command.run)

    quantize = sub.add_parser(
        "quantize", help="calibrate a checkpoint and write it with W4A8 (DuQuant) layers"
    )
    quantize.add_argument(
        "checkpoint",
        type=Path,
        help="FP32 checkpoint: ACT (Tempo or LeRobot), pi0 / pi0.5 (LeRobot or openpi)",
    )
    quantize.add_argument("out", type=Path, help="directory for the quantized checkpoint")
    quantize.add_argument("--observations", type=int, default=32, help="calibration observations")
    quantize.add_argument(
        "--recorded",
        type=Path,
        help=".npz of recorded observations (a replay file as `tempo profile` reads, or "
        "stacked images and state) to calibrate on instead of ones synthesized from the spec",
    )
    quantize.add_argument(
        "--task",
        help="the prompt of every observation, for pi0 / pi0.5 (default: the policy's "
        "default task)",
    )
    quantize.add_argument(
        "--tokenizer",
        type=Path,
        help="PaliGemma's SentencePiece model file, for a pi0 checkpoint that ships none",
    )
    quantize.add_argument(
        "--vision",
        action="store_true",
        help="quantize the vision tower's linear layers too (pi0 / pi0.5)",
    )
    quantize.add_argument(
        "--pi0-packs",
        type=Path,
        help="take the transforms from the pi0 DuQuant port's "
        "per-layer .npz packs in this directory instead of calibrating them",
    )
    quantize.add_argument(
        "--method",
        choices=["duquant", "rtn"],
        default="duquant",
        help="duquant (smoothing, block rotations, permutation) or rtn (plain round-to-nearest)",
    )
    quantize.add_argument(
        "--layers",
        choices=["transformer", "transformer+head"],
        default="transformer",
        help="which linear layers: the transformer's (pi0: the Gemma prefix and the action "
        "expert), or the action head's too (pi0: the state, action and time projections)",
    )
    quantize.add_argument("--block-size", type=int, default=32, help="rotation block, 16-128")
    quantize.add_argument(
        "--activations",
        choices=["static", "dynamic"],
        default="static",
        help="int8 activation scale: static (one per layer, calibrated) or dynamic (per token)",
    )
    quantize.add_argument(
        "--compiled-path",
        choices=["int8", "fused", "dequant"],
        default="int8",
        help="what the compiled and graph tiers run: int8 GEMM (torch ops), the same in Triton "
        "kernels on CUDA (fused), or dequantized weights",
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
        "--log-level",
        default=None,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default WARNING)",
    )
    quantize.set_defaults(func=lambda args: _quantize(args, setup_logging))


def cmd_checkpoint_inspect(args: argparse.Namespace) -> int:
    from policies.checkpoints.load import describe_checkpoint

    problems: list[str] = []
    print(describe_checkpoint(args.directory, problems))
    for problem in problems:  # described, but it cannot be served: say so in the exit code
        print(f"tempo: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _quantize(args: argparse.Namespace, setup_logging: Callable[[str], None]) -> int:
    setup_logging(args.log_level or "WARNING")
    from pydantic import ValidationError

    from controller.inference.build import resolve_device
    from controller.inference.progress import to_stderr
    from controller.tools.quantize import quantize_checkpoint
    from policies.quant.config import QuantSettings

    try:
        settings = QuantSettings(
            method=args.method,
            layers=args.layers,
            vision=args.vision,
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
        task=args.task,
        tokenizer=args.tokenizer,
        device=resolve_device(args.device, setting="--device"),
        progress=to_stderr("quantize"),  # stdout: the report only
    )
    print("\n".join(report.lines()))
    return 0
