"""Start-up time of a served policy: process start to ready, and to its first served action,
cold (an empty compile cache), warm (the compile cache an earlier start left), mega (a fresh
cache holding only the mega-cache file that start saved: what can be copied to another machine)
and with built artefacts (what `tempo build` makes), several starts each, as a table.

    python -m scripts.bench.bench_start --policy act-aloha --device cuda --repeats 3
    python -m scripts.bench.bench_start --policy tiny --device cpu             # CPU: compiled tier
    python -m scripts.bench.bench_start --checkpoint DIR --device cuda       # any checkpoint (pi0)
    python -m scripts.bench.bench_start --policy act-aloha --device cuda --modes built --logs LOGS

Policies: tiny (the tiny conv+MLP test policy, made in code), act-demo, act-aloha, tdmpc2 (the
5M planner at humanoid shapes) and flow-aloha, each with random weights written as a Tempo
checkpoint into the work folder; pi0 needs --checkpoint (a LeRobot or openpi pi0 folder).

Each start is a fresh Python process doing what the inference process does: its imports,
`build_policy` (checkpoint load, every tier built, warmed up, captured and parity-checked),
then one step on a random observation. The clock starts just before the process is spawned.
The build for the "built" rows is timed once, apart. "imports done" is when the child had
imported what the inference process imports (torch and its compiler among them). --json FILE
keeps every start's figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CHECKPOINT_POLICIES = ("act-demo", "act-aloha", "tdmpc2", "flow-aloha")
POLICIES = ("tiny", *CHECKPOINT_POLICIES, "pi0")
MODES = ("cold", "warm", "mega", "built")
NOTES = ("built artefacts:", "compile cache:", "policy started in")


def make_checkpoint(name: str, directory: Path) -> Path:
    """A Tempo checkpoint with random weights of benchmark policy `name`."""
    from policies.checkpoints.tempo_format import save_checkpoint

    if name == "tdmpc2":
        from policies.tdmpc2.config import TDMPC2Config
        from policies.tdmpc2.serving import random_tdmpc2_policy

        config = TDMPC2Config.model_validate({"obs_dim": 67, "action_dim": 21, "model_size": 5})
        policy = random_tdmpc2_policy(config)
    elif name == "flow-aloha":
        from policies.demo import make_flow_aloha_policy

        policy = make_flow_aloha_policy(seed=0)
    else:
        from policies.catalog import build_benchmark_policy

        policy, _ = build_benchmark_policy(name)  # type: ignore[arg-type]
    return save_checkpoint(directory, policy)


# ---- the child: one start ------------------------------------------------------------------


def child(plan: dict[str, Any]) -> int:
    """One start as `plan` says; prints IMPORTED, READY and ACTION lines as they happen."""
    import logging

    stamped = "%(relativeCreated)6.0f ms %(name)s: %(message)s"  # ms since this import
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=stamped)
    import controller.inference.process_main  # noqa: F401 - the inference process's imports

    print("IMPORTED", flush=True)  # the imports alone took seconds on some GPU hosts
    from controller.inference.build import build_policy, planner_runner
    from controller.inference.examples import random_observation
    from controller.policy_sections import PolicyConfig, RobotConfig
    from controller.runner_config import RunnerConfig

    runner_config = RunnerConfig.model_validate(plan["runner"])
    model = None
    if plan["checkpoint"] is None:
        from policies.catalog import build_benchmark_policy

        model, _ = build_benchmark_policy(plan["policy"])
        section = PolicyConfig(device=plan["device"])
    else:
        section = PolicyConfig(kind="checkpoint", path=plan["checkpoint"], device=plan["device"])
    built = build_policy(section, RobotConfig(), runner_config, model=model)
    runner = planner_runner(built)
    print("READY " + json.dumps({"tier": runner.tier}), flush=True)
    images, state = random_observation(runner.spec, 1)
    runner.predict_chunk(images, state)
    compiler = "torch._dynamo" in sys.modules  # a start from built artefacts does without it
    print("ACTION " + json.dumps({"compiler": compiler}), flush=True)
    return 0


# ---- the parent: starts, timed from outside ------------------------------------------------


def one_start(plan: dict[str, Any], timeout_s: float, log_to: Path | None = None) -> dict[str, Any]:
    command = [sys.executable, "-m", __spec__.name, "--child", json.dumps(plan)]
    result: dict[str, Any] = {"ok": False}
    with tempfile.TemporaryFile("w+") as log_file:  # a file: a full pipe would stall the child
        began = time.perf_counter()
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log_file, text=True, bufsize=1
        )
        timer = threading.Timer(timeout_s, process.kill)  # a hung start ends the read below
        timer.daemon = True
        timer.start()
        for line in process.stdout or ():
            now = time.perf_counter() - began
            if line.startswith("IMPORTED"):
                result["imported_s"] = now
            elif line.startswith("READY "):
                result.update(ready_s=now, **json.loads(line[6:]))
            elif line.startswith("ACTION "):
                result.update(first_action_s=now, ok=True, **json.loads(line[7:]))
                break
        timer.cancel()
        process.kill()  # done with it: the first action is all that is timed
        process.wait()
        log_file.seek(0)
        err = log_file.read()
    notes = [ln.split(": ", 1)[-1] for ln in err.splitlines() if any(n in ln for n in NOTES)]
    result["notes"] = notes
    if not result["ok"]:
        result["stderr_tail"] = err[-3000:]
    if log_to is not None:  # the whole log: which tiers failed and why
        log_to.write_text(err)
    return result


def plan_for(args: argparse.Namespace, checkpoint: Path | None, **runner: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"step_budget_ms": None, "top_tier": args.top_tier}
    settings.update({k: str(v) if isinstance(v, Path) else v for k, v in runner.items()})
    return {
        "policy": args.policy,
        "checkpoint": str(checkpoint) if checkpoint else None,
        "device": args.device,
        "runner": settings,
    }


def run(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    checkpoint = args.checkpoint
    if checkpoint is None and args.policy in CHECKPOINT_POLICIES:
        checkpoint = make_checkpoint(args.policy, work / "checkpoint")
    rows: list[dict[str, Any]] = []

    def measure(mode: str, plan: dict[str, Any]) -> None:
        log_to = None
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            log_to = args.logs / f"{len(rows):02d}-{mode}.log"
        result = one_start(plan, args.timeout, log_to)
        result["mode"] = mode
        rows.append(result)
        print(f"{mode}: {summary(result)}", file=sys.stderr, flush=True)

    warm_cache = work / "cache-cold-0"
    for i in range(args.repeats if "cold" in args.modes else 0):  # the first leaves warm's cache
        measure("cold", plan_for(args, checkpoint, cache_dir=work / f"cache-cold-{i}",
                                 built_artefacts="off"))  # fmt: skip
    for _ in range(args.repeats if "warm" in args.modes else 0):
        measure("warm", plan_for(args, checkpoint, cache_dir=warm_cache, built_artefacts="off"))
    for i in range(args.repeats if "mega" in args.modes else 0):  # only warm's mega-cache files
        cache = work / f"cache-mega-{i}"
        cache.mkdir(mode=0o700)
        for saved in warm_cache.glob("megacache-*.bin"):
            shutil.copy(saved, cache / saved.name)
        measure("mega", plan_for(args, checkpoint, cache_dir=cache, built_artefacts="off"))
    if "built" not in args.modes:
        return rows
    built = plan_for(args, checkpoint, cache_dir=work / "cache-built", artefacts_dir=work / "built",
                     built_artefacts="auto")  # fmt: skip
    measure("build", built)  # what `tempo build` does: a start that builds the artefacts
    for _ in range(args.repeats):
        measure("built", built)
    return rows


def summary(result: dict[str, Any]) -> str:
    if not result["ok"]:
        return "FAILED: " + result.get("stderr_tail", "")[-500:]
    return (
        f"imports {result.get('imported_s', float('nan')):.1f} s, "
        f"ready {result['ready_s']:.1f} s, first action {result['first_action_s']:.1f} s "
        f"({result.get('tier')}; compiler imported: {result.get('compiler')}); "
        f"{' | '.join(result['notes'][:2])}"
    )


def print_table(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    print(f"\n{args.policy or args.checkpoint} on {args.device}, top tier {args.top_tier}: "
          f"seconds from process start (median, min-max of {args.repeats})")  # fmt: skip
    print(f"{'mode':<6} {'starts':>6} {'imports done':>20} {'to ready':>20} "
          f"{'to first action':>20}  tier")  # fmt: skip
    for mode in ("cold", "warm", "mega", "build", "built"):
        done = [r for r in rows if r["mode"] == mode and r["ok"]]
        failed = sum(1 for r in rows if r["mode"] == mode and not r["ok"])
        if not done and not failed:  # a mode not asked for
            continue
        if not done:
            print(f"{mode:<6} {0:>6} {'-':>20} {'-':>20} {'-':>20}  ({failed} failed)")
            continue
        keys = ("imported_s", "ready_s", "first_action_s")
        cells = [_spread([r[key] for r in done if key in r]) for key in keys]
        tier = done[-1].get("tier")
        more = f" ({failed} failed)" if failed else ""
        print(
            f"{mode:<6} {len(done):>6} {cells[0]:>20} {cells[1]:>20} {cells[2]:>20}  {tier}{more}"
        )
    last = [r for r in rows if r["mode"] == "built" and r["ok"]]
    notes = last[-1]["notes"] if last else []
    said = [note for note in notes if note.startswith("built artefacts")]
    if said:
        print(f"the last built start said: {said[0]}")


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--policy", choices=POLICIES)
    source.add_argument("--checkpoint", type=Path, help="a checkpoint folder to start instead")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--top-tier", default=None, help="runner.top_tier (default: compiled on cpu, auto on cuda)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="starts per mode (default 3)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per start")
    parser.add_argument(
        "--modes", nargs="+", default=list(MODES), choices=MODES,
        help="which starts (default all; warm and mega need cold, which leaves their cache; "
        "built includes the build)",
    )  # fmt: skip
    parser.add_argument("--work", type=Path, help="keep caches and artefacts here (default: tmp)")
    parser.add_argument("--logs", type=Path, help="write each start's log into this folder")
    parser.add_argument("--json", dest="json_out", type=Path, help="write every start here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return child(json.loads(args.child))
    if args.policy is None and args.checkpoint is None:
        parser.error("name a --policy or a --checkpoint")
    if {"warm", "mega"} & set(args.modes) and "cold" not in args.modes:
        parser.error("warm and mega starts use the cache the first cold start leaves: add cold")
    if args.policy == "pi0":
        parser.error("--policy pi0 needs a real checkpoint: pass --checkpoint DIR instead")
    args.top_tier = args.top_tier or ("compiled" if args.device == "cpu" else "auto")
    work = args.work or Path(tempfile.mkdtemp(prefix="tempo-bench-start-"))
    work.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        rows = run(args, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print_table(args, rows)
    if args.json_out:
        args.json_out.write_text(json.dumps({"args": vars(args) | {"work": str(work)},
                                             "starts": rows}, indent=1, default=str))  # fmt: skip
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
