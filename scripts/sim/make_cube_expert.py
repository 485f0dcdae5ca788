"""Write the scripted transfer-cube expert as a Tempo checkpoint (the cube_expert family):

    python -m scripts.sim.make_cube_expert DIR [--grid 9] [--chunk 10] [--query-period 1]
    python -m scripts.sim.make_cube_expert DIR --from EXPERT --chunk 20 --query-period 20

Runs the expert's end-effector plan in gym-aloha's end-effector simulation for a grid of cube
positions covering gym-aloha's placement range (x 0..0.2, y 0.4..0.6) and stores the joint
trajectories; the served policy interpolates between them. Needs the sim extra; about half a
second a grid point on a CPU. `--chunk N`: chunks of N steps, a new one every `--query-period`
steps, the newest played (the checkpoint's execution; a chunk longer than one step covers the
steps its inference takes). `--from EXPERT`: the trajectories of that expert checkpoint, served
with other chunks (no simulation).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from policies.base import Execution
from policies.checkpoints.load import load_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from policies.cube_expert.checkpoint import build_expert
from policies.cube_expert.config import CubeExpertConfig
from policies.cube_expert.joint_table import trajectory_table
from policies.cube_expert.model import CubeExpert
from policies.cube_expert.waypoints import PLAN_STEPS

# gym-aloha's cube placement (gym_aloha.utils.sample_box_pose)
X_RANGE = (0.0, 0.2)
Y_RANGE = (0.4, 0.6)
JOINTS = tuple(
    f"{side}_{joint}"
    for side in ("left", "right")
    for joint in (
        "waist",
        "shoulder",
        "elbow",
        "forearm_roll",
        "wrist_angle",
        "wrist_rotate",
        "gripper",
    )
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--grid", type=int, default=9, help="grid points per axis")
    parser.add_argument("--chunk", type=int, default=10, help="steps per chunk (default 10)")
    parser.add_argument(
        "--query-period", type=int, default=1, help="steps between chunks (default 1)"
    )
    parser.add_argument("--from", dest="source", type=Path, help="reuse this expert's table")
    args = parser.parse_args()
    started = time.monotonic()
    if args.source is not None:
        module = load_checkpoint(args.source).module
        if not isinstance(module, CubeExpert):
            raise SystemExit(f"{args.source} holds no transfer-cube expert")
        table = module.table.numpy()
        config = module.config.model_copy(update={"chunk_size": args.chunk})
    else:
        xs = np.linspace(*X_RANGE, args.grid)
        ys = np.linspace(*Y_RANGE, args.grid)
        table = trajectory_table(xs.tolist(), ys.tolist())
        config = CubeExpertConfig(
            x_range=X_RANGE,
            y_range=Y_RANGE,
            nx=args.grid,
            ny=args.grid,
            steps=PLAN_STEPS,
            chunk_size=args.chunk,
        )
    execution = Execution(
        query_period=args.query_period,
        ensemble="newest",
        source=f"the expert's checkpoint (a chunk of {args.chunk} every {args.query_period})",
    )
    policy = build_expert(table, config, JOINTS, execution)
    save_checkpoint(args.out, policy)
    print(
        f"{config.nx}x{config.ny} trajectories of {config.steps} steps in "
        f"{time.monotonic() - started:.0f} s; written to {args.out}"
    )


if __name__ == "__main__":
    main()
