"""The delay study: success and return of the scripted transfer-cube expert in real time against
an injected, fixed extra inference delay, for plain chunk execution and temporal ensembling.

    PYTHONPATH=... python -m scripts.sim.delay_study EXPERT [--delays 0,1,2,4,8]
        [--episodes 10] [--chunk 20] [--plot docs/delay-study.png] [--json results.json]

EXPERT is a cube_expert checkpoint (scripts/sim/make_cube_expert.py). For each execution mode
and each delay (in control periods of the task's 50 Hz) the script writes the expert with that
delay (each step sleeps it: the daemon sees a slower inference), starts `tempo serve` on a private
socket with the mode's inference settings, runs the episodes of env aloha-transfer-cube-state
with the realtime clock through it, and stops it. Modes: `chunking` (a chunk of --chunk steps
played to its end, then the next: LeRobot's n_action_steps = chunk_size), `ensembling` (a chunk
every step, ACT's temporal ensembling, k = 0.01). Real-time chunking needs a flow policy, which
the expert is not: it is not among the modes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from controller.errors import DaemonUnavailable
from controller.sim.env_robot import run_env_episodes
from controller.sim.eval_summary import eval_summary
from policies.checkpoints.load import load_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from policies.cube_expert.checkpoint import build_expert
from policies.cube_expert.model import CubeExpert

ENV = "aloha-transfer-cube-state"
RATE_HZ = 50
MODES = {
    "chunking": lambda chunk: [f"inference.query_period={chunk}", "inference.ensemble=newest"],
    "ensembling": lambda chunk: [
        "inference.query_period=1",
        "inference.ensemble=temporal",
        "inference.temporal_k=0.01",
    ],
}
START_WAIT_S = 300.0  # a loaded CPU takes a minute to import torch and build the policy


def _delayed_expert(
    source: CubeExpert, spec_joints: tuple[str, ...], chunk: int, delay_ms: float, out: Path
) -> None:
    config = source.config.model_copy(update={"chunk_size": chunk, "study_delay_ms": delay_ms})
    save_checkpoint(out, build_expert(source.table.numpy(), config, spec_joints))


def _serve(
    checkpoint: Path, socket: Path, settings: list[str], log: Path
) -> subprocess.Popen[bytes]:
    sets = [
        "policy.kind=checkpoint",
        f"policy.path={checkpoint}",
        f"control.rate_hz={RATE_HZ}",
        f"server.bind=ipc://{socket}",
        f"server.status_bind=ipc://{socket}.status",
        "runner.top_tier=eager_fp32",
        "runner.step_budget_ms=2000",  # the injected delay is no overrun to demote for
        *settings,
    ]
    args = [sys.executable, "-m", "controller.cli", "serve"]
    for item in sets:
        args += ["--set", item]
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _episodes(socket: Path, seeds: list[int]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + START_WAIT_S
    while True:
        try:
            results = run_env_episodes(f"ipc://{socket}", ENV, "realtime", seeds)
            return [r.as_dict() for r in results]
        except DaemonUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(2.0)


def run_study(args: argparse.Namespace) -> list[dict[str, Any]]:
    policy = load_checkpoint(args.expert)
    source = policy.module
    if not isinstance(source, CubeExpert):
        raise SystemExit(f"{args.expert} holds no transfer-cube expert")
    seeds = list(range(args.seed, args.seed + args.episodes))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tempo-delay-") as scratch:
        work = Path(scratch)
        for mode in args.modes.split(","):
            for periods in [int(d) for d in args.delays.split(",")]:
                delay_ms = periods * 1000 / RATE_HZ
                checkpoint = work / f"{mode}-{periods}"
                _delayed_expert(source, policy.spec.joint_names, args.chunk, delay_ms, checkpoint)
                socket = work / f"{mode}-{periods}.sock"
                daemon = _serve(checkpoint, socket, MODES[mode](args.chunk), work / "serve.log")
                started = time.monotonic()
                try:
                    episodes = _episodes(socket, seeds)
                finally:
                    daemon.terminate()
                    daemon.wait(timeout=60)
                summary = eval_summary(ENV, "realtime", episodes)
                row = {
                    "mode": mode,
                    "delay_periods": periods,
                    "delay_ms": delay_ms,
                    **{k: summary[k] for k in ("episodes", "successes", "success_rate")},
                    "success_interval_95": summary["success_interval_95"],
                    "return_mean": summary["return_mean"],
                    "missed_ticks": summary["missed_ticks"],
                    "holds": summary["holds"],
                    "wall_s": time.monotonic() - started,
                }
                rows.append(row)
                print(
                    f"{mode:10s} delay {periods} periods ({delay_ms:.0f} ms): success "
                    f"{row['successes']}/{row['episodes']}, mean return {row['return_mean']:.1f}, "
                    f"{row['missed_ticks']} missed ticks, {row['holds']} holds",
                    flush=True,
                )
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        x = [r["delay_periods"] for r in mine]
        rate = [r["success_rate"] for r in mine]
        low = [r["success_rate"] - r["success_interval_95"][0] for r in mine]
        high = [r["success_interval_95"][1] - r["success_rate"] for r in mine]
        top.errorbar(x, rate, yerr=[low, high], marker="o", capsize=3, label=mode)
        bottom.plot(x, [r["return_mean"] for r in mine], marker="o", label=mode)
    top.set_ylabel("success (95% Wilson interval)")
    top.set_ylim(-0.05, 1.05)
    top.legend()
    n = rows[0]["episodes"]
    top.set_title(f"transfer-cube expert, realtime at {RATE_HZ} Hz, {n} episodes a point")
    bottom.set_ylabel("mean return")
    bottom.set_xlabel(f"injected inference delay (control periods of {1000 // RATE_HZ} ms)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("expert", type=Path)
    parser.add_argument("--delays", default="0,1,2,4,8", help="in control periods")
    parser.add_argument("--modes", default="chunking,ensembling")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=20, help="steps per chunk")
    parser.add_argument("--plot", type=Path, default=Path("docs/delay-study.png"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = run_study(args)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    plot(rows, args.plot)
    print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
