"""Write a small ACT checkpoint with random weights (see policies/demo.py).

python scripts/make_demo_checkpoint.py DIR [--camera front:96x128 ...] [--joints 6]
python scripts/make_demo_checkpoint.py DIR --policy flow         # the demo flow policy
python scripts/make_demo_checkpoint.py DIR --policy flow-aloha   # flow, 3 cams 480x640, H 50
"""

from __future__ import annotations

import argparse
import sys

from policies.demo import make_demo_checkpoint


def _camera(text: str) -> tuple[str, int, int]:
    try:
        name, size = text.split(":")
        height, width = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:HEIGHTxWIDTH") from None
    return name, height, width


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="where to write config.json and model.safetensors")
    parser.add_argument(
        "--camera",
        type=_camera,
        action="append",
        help="NAME:HEIGHTxWIDTH, repeat for more cameras (default front:96x128)",
    )
    parser.add_argument("--joints", type=int, default=6, help="commanded joints (default 6)")
    parser.add_argument("--state-size", type=int, default=None, help="default: --joints")
    parser.add_argument("--chunk-size", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--policy",
        choices=["act", "flow", "flow-aloha"],
        default="act",
        help="act (default; the options above apply); flow: the demo flow policy; flow-aloha: "
        "a flow policy at ALOHA shapes for benchmarks (policies/flow/demo.py)",
    )
    args = parser.parse_args(argv)
    if args.policy != "act":
        from policies.checkpoints.tempo_format import save_checkpoint
        from policies.demo import make_demo_flow_policy, make_flow_aloha_policy

        make = make_flow_aloha_policy if args.policy == "flow-aloha" else make_demo_flow_policy
        print(f"wrote {save_checkpoint(args.directory, make(seed=args.seed))}")
        return 0
    path = make_demo_checkpoint(
        args.directory,
        cameras=tuple(args.camera or [("front", 96, 128)]),
        joint_names=tuple(f"joint_{i}" for i in range(args.joints)),
        state_size=args.state_size or args.joints,
        chunk_size=args.chunk_size,
        seed=args.seed,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
