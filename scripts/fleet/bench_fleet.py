"""N simulated robots against one daemon: batching on against off, several policies, admission.

Every run starts the daemon afresh on the same machine; the modes (any together; none: the
fleet run):

  fleet (default)  for each robot count, the daemon twice: `execution.batch_sizes: [1]` (the
                   robots served one after another) and the batch sizes given. Robots ask
                   for a chunk every query period, timed as --drive says (tick: as the
                   daemon's tick reaches them; clock: by their own clock). Per run:
                   observation-to-action (sending an observation -> the first action of the
                   chunk computed from it) p50 and p99 over all robots and the worst robot's
                   p99, chunks past their deadline (counted in control ticks),
                   missed ticks, actions lost, robot steps (chunks) per second, the steps per
                   batch size, GPU utilisation (nvidia-smi, else n/a).
  --saturate       the same pairs at --saturate-rate (500 Hz) with robots that send the next
                   observation as soon as the chunk for the last one arrives, so demand exceeds
                   what one after another can serve: throughput batched / one after another,
                   and each bucket's step time as the runner measured it (how the model's step
                   scales with batch size).
  --mixed          one daemon, two policies (`act` and `pi0`; or --mixed-config's `policies:`),
                   robots on each at the policy's own rate (control rate / query period): per
                   policy p50/p99, whether every chunk came before its deadline, missed ticks,
                   lost messages.
  --admission N    execution.max_load set between the load of N robots and of N+1 (or
                   --max-load); robots connect one by one up to N+1: which hello was refused
                   and its sentence, and that the admitted robots kept being served.

    python -m scripts.fleet.bench_fleet --tiny --robots 1 2 4 --seconds 5            # a CPU check
    python -m scripts.fleet.bench_fleet --tiny --rate 10 --mixed --admission 2 --saturate --robots 4
    python -m scripts.fleet.bench_fleet --robots 1 2 4 8 16 --rate 50 --batch-sizes 1 2 4 8 16 \\
        --set policy.kind=checkpoint --set policy.path=ACT --set runner.cache_dir=DIR
    python -m scripts.fleet.bench_fleet --mixed --act-path ACT --pi0-path PI0 \\
        --set runner.cache_dir=DIR
    python -m scripts.fleet.bench_fleet --admission 16 --batch-sizes 1 2 4 8 16 \\
        --set policy.path=ACT ...

Without --tiny every policy runs in its own inference process, as `tempo serve` runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from controller.config import TempoConfig, load_config
from controller.errors import TempoError
from scripts.fleet.fleet_modes import DAEMON_SPLIT, admission_run, fleet_run, mixed_run
from scripts.fleet.fleet_robots import DEADLINE_RULE, DRIVES
from scripts.measure import shown, table


def sockets(tmp: str, robots: int) -> list[str]:
    return [f"server.bind=ipc://{tmp}/tempo.sock", f"server.status_bind=ipc://{tmp}/status.sock",
            f"server.max_robots={max(robots, 8)}"]  # fmt: skip


def fleet_config(args: argparse.Namespace, tmp: str, robots: int, sizes: list[int],
                 rate: float | None = None) -> TempoConfig:  # fmt: skip
    return load_config(args.config, [
        *args.sets, *sockets(tmp, robots), f"control.rate_hz={rate or args.rate}",
        f"execution.batch_sizes={json.dumps(sizes)}",
        f"execution.batch_window_us={args.window_us}",
    ])  # fmt: skip


def mixed_config(args: argparse.Namespace, tmp: str, robots: int) -> TempoConfig:
    """--mixed-config as given, else two policies: `act` and `pi0` (queried every
    --pi0-query-period control steps), each with the batch sizes given."""
    common = [*args.sets, *sockets(tmp, robots), f"control.rate_hz={args.rate}"]
    if args.mixed_config is not None:
        return load_config(args.mixed_config, common)
    if not args.tiny and (args.act_path is None or args.pi0_path is None):
        raise SystemExit("--mixed needs --act-path and --pi0-path (or --mixed-config, or --tiny)")
    batching = {"batch_sizes": args.batch_sizes, "batch_window_us": args.window_us}

    def entry(name: str, path: Path | None, **inference: Any) -> dict[str, Any]:
        policy = {"kind": "checkpoint", "path": str(path)} if path is not None else {}
        return {"name": name, "policy": policy, "execution": {**batching, **inference}}

    policies = [entry("act", args.act_path),
                entry("pi0", args.pi0_path, query_period=args.pi0_query_period)]  # fmt: skip
    return load_config(None, [*common, f"policies={json.dumps(policies)}"])


FLEET_COLUMNS = [
    ("robots", "robots"), ("batch", "batch_sizes"), ("p50 ms", "obs_to_action_p50_ms"),
    ("p99 ms", "obs_to_action_p99_ms"), ("worst p99", "worst_robot_p99_ms"),
    ("late", "late_chunks"), ("unserved", "unserved_periods"), ("missed", "missed_ticks"),
    ("lost", "lost"),
    ("steps/s", "robot_steps_per_s"), ("steps by bucket", "steps_by_bucket"),
    ("wait p99", "daemon_wait_p99_ms"), ("infer p99", "daemon_inference_p99_ms"),
    ("daemon o->a p99", "daemon_obs_to_action_p99_ms"), ("gpu %", "gpu_util"),
]  # fmt: skip
DAEMON_NOTE = (
    "daemon side (its telemetry, ms): wait = observation received -> inference starts; infer = "
    "the policy call with the trips to its process; daemon o->a = received -> first action "
    "sent, which includes the wait for the next control tick (up to one control period)"
)
SATURATE_COLUMNS = [*FLEET_COLUMNS[:3], ("p99 ms", "obs_to_action_p99_ms"),
                    ("demand/s", "demand_per_s"), ("1-by-1/s", "one_by_one_can_serve_per_s"),
                    ("steps/s", "robot_steps_per_s"), ("missed", "missed_ticks"),
                    ("lost", "lost"), ("bucket step ms", "step_ms_by_bucket"),
                    ("steps by bucket", "steps_by_bucket"), ("gpu %", "gpu_util")]  # fmt: skip
MIXED_COLUMNS = [
    ("policy", "policy"), ("robots", "robots"), ("rate Hz", "rate_hz"),
    ("deadline ms", "deadline_ms"), ("ticks", "deadline_ticks"),
    ("p50 ms", "obs_to_action_p50_ms"), ("p99 ms", "obs_to_action_p99_ms"),
    ("worst p99", "worst_robot_p99_ms"), ("chunks", "chunks"), ("late", "late_chunks"),
    ("unserved", "unserved_periods"), ("all on time", "all_on_time"),
    ("lost", "lost"), ("load", "load"), ("bucket step ms", "step_ms_by_bucket"),
]  # fmt: skip

ROBOT_COLUMNS = [
    ("robot", "robot"), ("policy", "policy"), ("rate Hz", "rate_hz"),
    ("deadline ms", "deadline_ms"), ("p50 ms", "p50_ms"), ("p99 ms", "p99_ms"),
    ("chunks", "chunks"), ("late", "late_chunks"), ("late at s", "late_at_s"),
    ("unserved", "unserved_periods"), ("actions", "actions"), ("lost", "lost"),
]  # fmt: skip


def compare_pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per robot count: batched against one after another, and against one robot batched."""
    serial = {r["robots"]: r for r in rows if r["batch_sizes"] == [1]}
    batched = {r["robots"]: r for r in rows if r["batch_sizes"] != [1]}
    single = batched.get(1) or serial.get(1)
    ratios = []
    for robots, row in sorted(batched.items()):
        one_by_one = serial.get(robots)
        serial_steps = one_by_one["robot_steps_per_s"] if one_by_one else None
        single_p99 = single["obs_to_action_p99_ms"] if single else None
        ratios.append({
            "robots": robots,
            "throughput_vs_one_after_another": _ratio(row["robot_steps_per_s"], serial_steps),
            "p99_vs_single_robot": _ratio(row["obs_to_action_p99_ms"], single_p99),
        })  # fmt: skip
    return ratios


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def pairs(args: argparse.Namespace, tmp: str, eager: bool) -> list[dict[str, Any]]:
    rate = args.saturate_rate if eager else args.rate
    rows = []
    for robots in args.robots:
        for sizes in ([1], args.batch_sizes):
            config = fleet_config(args, tmp, robots, sizes, rate)
            row = fleet_run(config, robots, args.seconds, args.tiny,
                            "eager" if eager else args.drive)  # fmt: skip
            one_step = row["step_ms_by_bucket"].get(1)
            # An eager robot gets at most a chunk a control period: what it can ask for, and
            # what robots served one after another can get at most.
            row["demand_per_s"] = robots * rate
            row["one_by_one_can_serve_per_s"] = 1e3 / one_step if one_step else None
            rows.append(row)
    drive = "" if eager else f", robots driven by {args.drive}"
    print(f"\n{'saturation' if eager else 'fleet'}: {rate:g} Hz, {args.seconds:g} s a run{drive}")
    print(table(rows, SATURATE_COLUMNS if eager else FLEET_COLUMNS))
    if not eager:
        print(f"  {DAEMON_NOTE}")
    ratios = compare_pairs(rows)
    print(table(ratios, [("robots", "robots"), ("throughput batched / one-by-one",
                                            "throughput_vs_one_after_another"),
                         ("p99 / one robot's", "p99_vs_single_robot")]))  # fmt: skip
    if eager:
        print("  robots send again as soon as their chunk arrives, at most a chunk a control "
              "period each: saturated where demand/s exceeds 1-by-1/s (else raise "
              "--saturate-rate or --robots)")  # fmt: skip
    return [*rows, *({"mode": "ratios", **r} for r in ratios)]


def mixed(args: argparse.Namespace, tmp: str) -> list[dict[str, Any]]:
    counts = {}
    for item in args.mixed_robots:
        name, _, count = item.partition("=")
        counts[name] = int(count)
    config = mixed_config(args, tmp, sum(counts.values()))
    rows = mixed_run(config, counts, args.seconds, args.tiny, args.drive)
    print(f"\nmixed: one daemon at {args.rate:g} Hz, {args.seconds:g} s, robots driven by "
          f"{args.drive}")  # fmt: skip
    print(table(rows[:-1], MIXED_COLUMNS))
    print("  each robot:")
    print(table([robot for row in rows[:-1] for robot in row["per_robot"]], ROBOT_COLUMNS))
    daemon = rows[-1]
    print(f"  deadline: {DEADLINE_RULE}")
    for row in rows[:-1]:
        if row["deadline_ms"] is not None and row["deadline_ms"] >= row["watchdog_hold_ms"]:
            print(f"  note: {row['policy']}'s robots send an observation every "
                  f"{row['deadline_ms']:g} ms, past guards.hold_after_ms "
                  f"({row['watchdog_hold_ms']:g}): they get holds between chunks")  # fmt: skip
    print(f"  missed ticks (the daemon's one loop): {daemon['missed_ticks']}; "
          f"GPU utilisation: {shown(daemon['gpu_util'])}")  # fmt: skip
    split = ", ".join(f"{label} {shown(daemon[f'{field}_p99_ms'])}"
                      for field, _, label in DAEMON_SPLIT)  # fmt: skip
    print(f"  every policy together, p99: {split}; {DAEMON_NOTE}")
    return rows


def admission(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    n = args.admission
    sizes = [size for size in args.batch_sizes if size <= n] or [1]
    config = fleet_config(args, tmp, n + 1, sizes)
    row = admission_run(config, n, args.seconds, args.tiny, args.drive, max_load=args.max_load)
    print(f"\nadmission: {n} robots, then one more; {args.rate:g} Hz, batch sizes {sizes}")
    print(f"  load of {n} robots {shown(row['load_n'])}, of {n + 1} {shown(row['load_n_plus_1'])}"
          f"; execution.max_load {shown(row['max_load'])}")  # fmt: skip
    for refusal in row["refused"]:
        print(f"  hello {refusal['hello']} ({refusal['robot']}) refused: {refusal['sentence']}")
    if not row["refused"]:
        print("  no hello was refused")
    print(f"  admitted {row['admitted']}: {row['admitted_actions']} actions, "
          f"{row['admitted_lost']} lost, {row['admitted_expired']} expired (past their deadline "
          f"at the robot), worst robot's observation-to-action p99 "
          f"{shown(row['admitted_worst_p99_ms'])} ms, {row['admitted_reconnects']} reconnects, "
          f"missed ticks "
          f"{row['missed_ticks']}; chunks after the "
          f"refusal per robot: {shown(row['admitted_chunks_after_refusal'])}")  # fmt: skip
    return row


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--window-us", type=int, default=0)
    parser.add_argument("--rate", type=float, default=50.0, help="control rate, Hz")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--drive", choices=DRIVES[:2], default="tick",
                        help="tick: a robot sends its observation as the daemon's tick reaches "
                             "it (a driver stepped by the stream); clock: by its own clock, at "
                             "whatever phase against the daemon's tick")  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="the tiny policy, in this process")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], dest="sets")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here too")
    parser.add_argument("--saturate", action="store_true", help="robots that never wait")
    parser.add_argument("--saturate-rate", type=float, default=500.0,
                        help="the control rate of --saturate's runs, Hz")  # fmt: skip
    parser.add_argument("--mixed", action="store_true", help="two policies in one daemon")
    parser.add_argument("--mixed-config", type=Path, default=None, help="its `policies:`")
    parser.add_argument("--mixed-robots", nargs="+", default=["act=8", "pi0=2"],
                        metavar="POLICY=COUNT")  # fmt: skip
    parser.add_argument("--act-path", type=Path, default=None)
    parser.add_argument("--pi0-path", type=Path, default=None)
    parser.add_argument("--pi0-query-period", type=int, default=5, help="50 Hz / 5 = 10 Hz")
    parser.add_argument("--admission", type=int, default=None, metavar="N")
    parser.add_argument("--max-load", type=float, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.saturate:
            rows += pairs(args, tmp, eager=True)
        if args.mixed:
            rows += mixed(args, tmp)
        if args.admission is not None:
            rows.append(admission(args, tmp))
        if not (args.saturate or args.mixed or args.admission is not None):
            rows += pairs(args, tmp, eager=False)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    try:
        main()
    except TempoError as exc:  # a config or checkpoint the daemon refuses: its one sentence
        sys.exit(f"bench_fleet: {exc}")
