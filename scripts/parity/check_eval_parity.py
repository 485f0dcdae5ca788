"""Check that Tempo in lockstep acts as LeRobot's own eval loop does: the same checkpoint, the
same environment seeds, observations and actions compared step by step.

Runs with Tempo's interpreter (the daemon and the driver are Tempo's, as `tempo serve` and
`tempo eval --clock lockstep` run them); LeRobot's side runs in a LeRobot 0.6.1 environment
given by --lerobot-python (scripts/parity/lerobot_eval_rollout.py, which imports nothing of
Tempo's). For each environment and family:

1. LeRobot makes a policy of reduced widths with random weights and saves it with its own
   `save_pretrained` (n_action_steps 1: a query every step, what lockstep compares with).
2. LeRobot's `lerobot.scripts.lerobot_eval.rollout` runs one episode per seed on the vector env
   LeRobot's env config builds (episode_length = --steps), keeping observations and actions.
3. `tempo serve` serves the same directory (FP32 eager tier, guards off as by default) and the
   environment is driven through the daemon by Tempo's lockstep driver (run_episode, as in
   `tempo eval`), one episode per seed.
4. Per seed: the frames must be equal (uint8), the states equal to FP32 rounding (relative
   to their largest, within --tolerance), and the actions: it prints the worst step's relative
   error max|tempo - lerobot| / max|lerobot| and exits 1 past --tolerance (1e-5).

Noise: Diffusion Policy draws Gaussian noise for every chunk. Tempo serves it here with
`policy.diffusion.noise: fixed`, so every chunk uses the module's fixed noise bank (seeded
from policies.diffusion.model.NOISE_SEED); the bank is read from the loaded checkpoint and
LeRobot's torch.randn returns its draws in the same order during the rollout (the start
sample, then one per DDIM/DDPM step that adds noise). Both sides then sample the same noise.

    PYTHONPATH=. MUJOCO_GL=osmesa python -m scripts.parity.check_eval_parity
    ... --envs pusht --families act --seeds 0,1,2 --steps 20
    ... --save-reference tests/data/eval_parity --reference-steps 8   # the CI references

`--save-reference DIR` writes, per case, a checkpoint with a compressible (sparse) backbone, as a
.tar.xz of LeRobot's directory, and LeRobot's first --reference-steps actions and states per
seed (DIR/ENV_FAMILY/): tests/integration/test_eval_parity_reference.py replays them through
Tempo's daemon without LeRobot.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SIDE = ROOT / "scripts" / "parity" / "lerobot_eval_rollout.py"
DEFAULT_LEROBOT_PYTHON = "/work/venvs/lerobot/bin/python"
# The daemon's tick rate: one observation is answered within a period (the whole of it, as the
# driver sends just after a tick), and an ALOHA-sized ResNet on a loaded CPU takes a while.
RATES = {"pusht": 5.0, "aloha-transfer-cube": 1.0, "aloha-insertion": 1.0}


@dataclass
class Trajectory:
    frames: list[np.ndarray] = field(default_factory=list)
    states: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    resent: int = 0


def lerobot(python: str, *args: str) -> None:
    """Run LeRobot's side; its output goes to this one's stderr."""
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa"), "TQDM_DISABLE": "1"}
    subprocess.run([python, str(SIDE), *args], check=True, env=env, stdout=sys.stderr)


def serve_args(checkpoint: Path, env_name: str, family: str, work: Path) -> list[str]:
    """`tempo serve` options for the case (FP32 eager tier, private ipc endpoints)."""
    from controller.sim.envs.catalog import layout_of

    layout = layout_of(env_name)
    sets = [
        "policy.kind=checkpoint",
        f"policy.path={checkpoint}",
        f"policy.joint_names=[{','.join(layout.joints)}]",
        f"control.rate_hz={RATES[env_name]:g}",
        "runner.top_tier=eager_fp32",
        f"server.bind=ipc://{work}/tempo.sock",
        f"server.status_bind=ipc://{work}/status.sock",
        # A slow simulator leaves the daemon without observations for a second or more.
        "guards.hold_after_ms=60000",
        "guards.stop_after_ms=120000",
        # Lockstep sends nothing while the policy infers: ACT on ALOHA's 480x640 frames took
        # 11.8 s a step on the loaded 2-core CPU, past the default 5 s session timeout.
        "server.session_timeout_s=600",
    ]
    if family == "diffusion":
        sets.append("policy.diffusion.noise=fixed")
    return [arg for s in sets for arg in ("--set", s)]


def tempo_rollouts(
    checkpoint: Path, env_name: str, family: str, seeds: list[int], steps: int, work: Path
) -> dict[int, Trajectory]:
    """Tempo's lockstep episodes through a `tempo serve` child process."""
    from controller.observe.status_server import request_status
    from controller.sim.env_driver import connect_env_client
    from controller.sim.envs import make_env
    from controller.sim.episode_loop import run_episode
    from controller.sim.first_answers import FirstAnswers

    log = open(work / "daemon.log", "w")
    args = [sys.executable, "-m", "controller.cli", "serve", "--log-level", "INFO"]
    args += serve_args(checkpoint, env_name, family, work)
    daemon = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 600
        while request_status(f"ipc://{work}/status.sock", 0.5) is None:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"tempo serve did not start: {(work / 'daemon.log').read_text()}"
                )
        env = make_env(env_name)
        answers = FirstAnswers()
        client = connect_env_client(
            f"ipc://{work}/tempo.sock", env.layout, frames_in_place=False,
            on_command=answers.on_command,
        )  # fmt: skip
        out: dict[int, Trajectory] = {}
        try:
            for seed in seeds:
                trajectory = Trajectory()

                def on_step(
                    observation: Any, action: np.ndarray, t: Trajectory = trajectory
                ) -> None:
                    t.frames.append(next(iter(observation.images.values())))
                    t.states.append(observation.state.copy())
                    t.actions.append(action.copy())

                result = run_episode(
                    client, env, seed, "lockstep", max_steps=steps, on_step=on_step,
                    answers=answers,
                )  # fmt: skip
                trajectory.resent = result.resent
                out[seed] = trajectory
                done = f"{result.length} steps, {result.resent} resent, {result.wall_s:.1f} s"
                print(f"Tempo lockstep {env_name} seed {seed}: {done}", file=sys.stderr)
        finally:
            client.close()
            env.close()
        return out
    finally:
        daemon.terminate()
        daemon.wait(30)
        log.close()


def compare(theirs: dict[str, Any], ours: Trajectory, seed: int) -> dict[str, float]:
    """Per seed: the worst step's relative action error, the states' and frames' largest
    differences, and whether LeRobot's and Tempo's episodes have the same length."""
    steps = len(ours.actions)  # LeRobot's first steps, where Tempo ran fewer (--tempo-steps)
    actions = theirs[f"seed{seed}.action"][:steps]
    states = theirs[f"seed{seed}.state"][:steps]
    frames = theirs[f"seed{seed}.frames"][:steps]
    if len(actions) != steps:
        raise AssertionError(f"seed {seed}: Tempo ran {steps} steps, LeRobot {len(actions)}")
    mine = np.stack(ours.actions)
    scale = np.abs(actions).max(axis=1, keepdims=True)
    per_step = (np.abs(mine - actions) / np.maximum(scale, 1e-12)).max(axis=1)
    frame_diff = np.abs(np.stack(ours.frames).astype(np.int16) - frames.astype(np.int16)).max()
    return {
        "action": float(per_step.max()),
        "action_abs": float(np.abs(mine - actions).max()),
        "state": float(np.abs(np.stack(ours.states) - states).max()),
        "state_relative": float(
            np.abs(np.stack(ours.states) - states).max() / np.abs(states).max()
        ),
        "frames": float(frame_diff),
        "first_bad_step": float(np.argmax(per_step > 1e-5)) if (per_step > 1e-5).any() else -1.0,
    }


def save_noise(checkpoint: Path, target: Path) -> None:
    """The fixed noise bank of Tempo's Diffusion Policy for this checkpoint."""
    import torch
    from safetensors.torch import save_file

    from policies.checkpoints.load import load_checkpoint

    module: Any = load_checkpoint(checkpoint).module
    save_file({"noise": module.noise_bank.to(torch.float32).contiguous()}, str(target))


def read_rollout(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def run_case(args: argparse.Namespace, env_name: str, family: str, work: Path) -> float:
    case = work / f"{env_name}_{family}"
    case.mkdir(parents=True, exist_ok=True)
    checkpoint = case / "checkpoint"
    if not args.reuse or not (case / "lerobot_rollout.safetensors").exists():
        make = ["make", "--env", env_name, "--family", family, "--out", str(case)]
        lerobot(args.lerobot_python, *make, *(["--sparse"] if args.save_reference else []))
        rollout = ["rollout", "--env", env_name, "--out", str(case), "--seeds", args.seeds]
        rollout += ["--steps", str(args.steps)]
        if family == "diffusion":
            save_noise(checkpoint, case / "noise.safetensors")
            rollout += ["--noise", str(case / "noise.safetensors")]
        lerobot(args.lerobot_python, *rollout)
    theirs = read_rollout(case / "lerobot_rollout.safetensors")
    seeds = [int(s) for s in args.seeds.split(",")]
    tempo_steps = min(args.tempo_steps or args.steps, args.steps)
    ours = tempo_rollouts(checkpoint, env_name, family, seeds, tempo_steps, case)
    saved: dict[str, Any] = {
        f"seed{seed}.{part}": np.stack(getattr(t, part + "s"))
        for seed, t in ours.items()
        for part in ("action", "state", "frame")
    }
    np.savez(case / "tempo_rollout.npz", **saved)  # for a closer look
    worst = 0.0
    for seed in seeds:
        figures = compare(theirs, ours[seed], seed)
        # The same trajectory: equal frames, states equal to FP32 rounding.
        same = figures["frames"] == 0 and figures["state_relative"] <= args.tolerance
        worst = max(worst, figures["action"] if same else float("inf"))
        print(
            f"{env_name} {family} seed {seed}: {tempo_steps} steps, actions worst relative "
            f"{figures['action']:.2e} (abs {figures['action_abs']:.2e}), states max diff "
            f"{figures['state']:.2e}, frames max diff {figures['frames']:.0f}, resent "
            f"{ours[seed].resent}" + (f", first step past 1e-5: {figures['first_bad_step']:.0f}"
                                      if figures["first_bad_step"] >= 0 else ""),
            flush=True,
        )  # fmt: skip
    if args.save_reference is not None:
        save_reference(args.save_reference, env_name, family, case, theirs, seeds, args)
    return worst


def save_reference(
    root: Path,
    env_name: str,
    family: str,
    case: Path,
    theirs: dict[str, np.ndarray],
    seeds: list[int],
    args: argparse.Namespace,
) -> None:
    """The checkpoint (LeRobot's directory as .tar.xz) and LeRobot's first steps per seed."""
    from safetensors.numpy import save_file

    target = root / f"{env_name}_{family}"
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target / "checkpoint.tar.xz", "w:xz") as archive:
        archive.add(case / "checkpoint", arcname="checkpoint")
    steps = args.reference_steps
    kept = {
        f"seed{seed}.{part}": np.ascontiguousarray(theirs[f"seed{seed}.{part}"][:steps])
        for seed in seeds
        for part in ("action", "state")
    }
    save_file(kept, str(target / "lerobot_rollout.safetensors"))
    if family == "diffusion":
        (target / "noise.txt").write_text("served with policy.diffusion.noise=fixed\n")
    print(f"saved the reference to {target}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--lerobot-python", default=DEFAULT_LEROBOT_PYTHON)
    parser.add_argument("--envs", default="pusht,aloha-transfer-cube")
    parser.add_argument("--families", default="act,diffusion")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=20, help="steps per episode")
    parser.add_argument(
        "--tempo-steps", type=int, help="compare only Tempo's first N steps (default --steps)"
    )
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--work", type=Path, help="where the cases go (default: a temp dir)")
    parser.add_argument(
        "--reuse", action="store_true", help="reuse LeRobot's rollouts already under --work"
    )
    parser.add_argument("--save-reference", type=Path, help="write the CI references here")
    parser.add_argument("--reference-steps", type=int, default=8)
    args = parser.parse_args(argv)
    if not Path(args.lerobot_python).exists():
        print(f"no LeRobot environment at {args.lerobot_python}; give --lerobot-python")
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="tempo_eval_parity_"))
    worst = 0.0
    for env_name in args.envs.split(","):
        for family in args.families.split(","):
            worst = max(worst, run_case(args, env_name, family, work))
    verdict = "PASS" if worst <= args.tolerance else "FAIL"
    print(f"{verdict}: worst relative action error {worst:.2e} (tolerance {args.tolerance:.0e})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
