"""The transfer-cube expert's success in process, without the daemon: each episode of env
aloha-transfer-cube-state steps the checkpoint's policy directly, one control step per
environment step (the reference the daemon's `tempo eval` is compared with).

    python -m scripts.sim.expert_in_process CHECKPOINT [--episodes 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from controller.sim.envs import make_env
from policies.base import RobotContext
from policies.checkpoints.load import load_checkpoint
from policies.tensor_policy import EagerPolicy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    policy = EagerPolicy(load_checkpoint(args.checkpoint))
    env = make_env("aloha-transfer-cube-state")
    wins = 0
    started = time.monotonic()
    for seed in range(args.seed, args.seed + args.episodes):
        observation = env.reset(seed)
        memory: dict[str, np.ndarray] = {}
        success, total, steps = False, 0.0, 0
        for t in range(env.layout.max_steps):
            context = RobotContext(
                step=t,
                episode_start=t == 0,
                state_history=observation.state.reshape(1, -1).astype(np.float32),
                memory=memory,
            )
            prediction = policy.predict({}, context)
            memory = dict(prediction.memory or memory)
            step = env.step(prediction.actions[0])
            total += step.reward
            steps += 1
            success = success or step.success
            observation = step.observation
            if step.done:
                break
        wins += success
        print(
            f"seed {seed}: {'success' if success else 'failure'}, return {total:g}, {steps} steps"
        )
    print(
        f"{wins}/{args.episodes} successes ({wins / args.episodes:.0%}) in process, "
        f"{time.monotonic() - started:.0f} s"
    )
    env.close()


if __name__ == "__main__":
    main()
