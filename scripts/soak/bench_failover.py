"""Failover and swap, measured through a real daemon and a robot driver.

    python -m scripts.soak.bench_failover --policy tiny                 # CPU, seconds per run
    python -m scripts.soak.bench_failover --policy act-aloha --repeats 5 --set runner.cache_dir=DIR
    python -m scripts.soak.bench_failover --policy act-aloha --build --set runner.cache_dir=DIR

1. SIGKILL of the inference process to the next action from a new observation, with a hot
   standby (supervision.standby: hot), with the spare (spare: imports done and the policy read
   ahead, a build follows) and with neither (off); with --double also the serving process and
   the standby killed together. The driver sends observations at --obs-hz and records every action
   with the observation it came from; after the kill, the first action whose observation was
   sent after the kill is the one timed. Also counted: actions from observations older than
   the fault that arrived after the first new one (the goal is none).
2. A swap under a robot at --rate Hz (`tempo swap --now`, a checkpoint of the same family with
   another seed): missed ticks (the daemon's counter across the swap), lost messages (gaps in
   the daemon's action/hold numbers at the driver), holds at the switch, and the first action
   from the new policy relative to the switch (the first action of an observation sent after
   the daemon switched).
3. A swap at episode starts under the same robot (`tempo swap`, no --now): from the robot's
   episode-start observation to the episode's first action, the first from the new policy,
   against the same measure at episode starts just before the swap; and missed ticks, lost
   messages and holds across it.

Each policy is made here with random weights (two seeds: the served one and the swapped-in
one) as Tempo checkpoints in a temporary directory; with --build, `tempo build` (same --set
settings) first makes both checkpoints' artefacts, so that every start, the standby's and the
swap's included, loads them (the build's own time is printed, not part of any figure).
`bench_failover.failover` and `bench_failover.swap` are functions for scripts/bench/bench_start.py
to call; this script prints a table (or --json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from controller.observe.status_server import request_command, request_status
from controller.wire.client import TempoClient
from controller.wire.commands import Command


def _tiny(directory: Path, seed: int) -> Path:
    from policies.checkpoints.tempo_format import save_checkpoint
    from policies.flow.demo import make_demo_flow_policy

    flow = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=20, dim_model=16,
                                 n_steps=2, seed=seed)  # fmt: skip
    return save_checkpoint(directory, flow)


def _act_demo(directory: Path, seed: int) -> Path:
    from policies.demo import make_demo_checkpoint

    return make_demo_checkpoint(directory, seed=seed)


def _act_aloha(directory: Path, seed: int) -> Path:
    from policies.checkpoints.tempo_format import save_checkpoint
    from policies.demo import make_aloha_policy

    return save_checkpoint(directory, make_aloha_policy(seed=seed))


def _flow(directory: Path, seed: int) -> Path:
    from policies.checkpoints.tempo_format import save_checkpoint
    from policies.flow.demo import make_demo_flow_policy

    return save_checkpoint(directory, make_demo_flow_policy(seed=seed))


def _tdmpc2(directory: Path, seed: int) -> Path:
    from policies.demo import make_demo_tdmpc2_checkpoint

    return make_demo_tdmpc2_checkpoint(directory, seed=seed)


# name -> a maker of a checkpoint with random weights (seeded) in a directory
POLICIES: dict[str, Callable[[Path, int], Path]] = {
    "tiny": _tiny,
    "act-demo": _act_demo,
    "act-aloha": _act_aloha,
    "flow-demo": _flow,
    "tdmpc2-demo": _tdmpc2,
}
START_TIMEOUT_S = 900.0  # a cold compile of a big model


@dataclass
class Received:
    received_ns: int
    kind: str  # action or hold
    obs_seq: int  # an action's observation (-1 for a hold)
    reason: str


class Driver:
    """A robot on its own thread: an observation every 1/obs_hz s, every command recorded
    (`log`); `sent` maps each observation's seq to when it went out (monotonic ns)."""

    def __init__(self, endpoint: str, spec: Any, obs_hz: float) -> None:
        cameras = {c.name: (c.height, c.width) for c in spec.cameras}
        self.log: list[Received] = []  # every action and hold as it reaches the driver
        self.client = TempoClient(endpoint, "bench", list(spec.joint_names), cameras,
                                  spec.state_size, on_command=self._received)  # fmt: skip
        self.sent: dict[int, int] = {}
        self.episode_starts: list[int] = []  # seqs of the observations that started one
        self._start_episode = threading.Event()
        self.period_s = 1.0 / obs_hz
        self.images = {c.name: np.zeros(c.shape, np.uint8) for c in spec.cameras}
        self.state = np.zeros(spec.state_size, np.float32)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _received(self, command: Command, session: str) -> None:
        self.log.append(
            Received(time.monotonic_ns(), command.kind, command.obs_seq, command.reason or "")
        )

    def __enter__(self) -> Driver:
        self.client.connect()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()

    def _run(self) -> None:
        next_obs = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_obs:
                start = self._start_episode.is_set()
                seq = self.client.send_observation(self.images, self.state, episode_start=start)
                if seq is not None:
                    self.sent[seq] = time.monotonic_ns()
                    if start:
                        self._start_episode.clear()
                        self.episode_starts.append(seq)
                next_obs = max(next_obs + self.period_s, now)
            self.client.receive(timeout_s=0.001)

    def episode_start_to_action(self, timeout_s: float) -> tuple[float, int]:
        """Starts an episode with the next observation; seconds from its sending to the first
        action at the robot from it or a later observation (the daemon plans from the newest
        it holds when it asks the policy), and the holds the robot got in between (its plan is
        cleared at an episode start)."""
        started = len(self.episode_starts)
        self._start_episode.set()
        _wait(lambda: len(self.episode_starts) > started, timeout_s, "no episode started")
        seq = self.episode_starts[-1]
        sent_ns = self.sent[seq]
        first = self.first_action_after(seq - 1, timeout_s)
        if first is None:
            raise SystemExit("bench_failover: no action in the episode")
        holds = sum(1 for r in list(self.log) if r.kind == "hold"
                    and sent_ns <= r.received_ns <= first.received_ns)  # fmt: skip
        return (first.received_ns - sent_ns) / 1e9, holds

    def last_seq(self) -> int:
        return max(self.sent, default=0)

    def served_lately(self, within_s: float = 0.5) -> bool:
        """Whether an action reached the robot within the last `within_s`."""
        since = time.monotonic_ns() - int(within_s * 1e9)
        return any(r.kind == "action" and r.received_ns > since for r in self.log[-50:])

    def first_action_after(self, seq: int, timeout_s: float) -> Received | None:
        """The first action from an observation after `seq`, waiting up to `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = next((r for r in list(self.log) if r.kind == "action" and r.obs_seq > seq),
                         None)  # fmt: skip
            if found is not None:
                return found
            time.sleep(0.002)
        return None


@contextlib.contextmanager
def daemon(checkpoint: Path, settings: list[str]) -> Iterator[tuple[str, str]]:
    """`tempo serve` of `checkpoint`, ready; yields its (robot endpoint, status endpoint)."""
    with tempfile.TemporaryDirectory(prefix="tempo-failover-") as tmp:
        bind, status_at = f"ipc://{tmp}/tempo.sock", f"ipc://{tmp}/status.sock"
        sets = [f"server.bind={bind}", f"server.status_bind={status_at}",
                "policy.kind=checkpoint", f"policy.path={checkpoint}", *settings]  # fmt: skip
        args = [arg for s in sets for arg in ("--set", s)]
        cli = [sys.executable, "-m", "controller.cli", "serve", "--log-level", "WARNING"]
        process = subprocess.Popen([*cli, *args])
        try:
            started = time.monotonic()
            while request_status(status_at, 0.5) is None:
                if process.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                    raise SystemExit("bench_failover: the daemon did not start")
            yield bind, status_at
        finally:
            process.terminate()
            process.wait(30)


def build(checkpoint: Path, settings: list[str]) -> float:
    """`tempo build` of `checkpoint` with `settings` (its artefacts beside it); seconds."""
    sets = ["policy.kind=checkpoint", f"policy.path={checkpoint}", *settings]
    args = [arg for s in sets for arg in ("--set", s)]
    started = time.monotonic()
    cli = [sys.executable, "-m", "controller.cli", "build", "--log-level", "WARNING", *args]
    if subprocess.run(cli, timeout=START_TIMEOUT_S).returncode != 0:
        raise SystemExit(f"bench_failover: tempo build of {checkpoint} failed (said above)")
    return time.monotonic() - started


def _process(status_at: str) -> dict[str, Any]:
    return ((request_status(status_at, 2.0) or {}).get("policy") or {}).get("process") or {}


def _wait(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise SystemExit(f"bench_failover: {what} within {timeout_s:.0f} s")


def failover(
    checkpoint: Path,
    spec: Any,
    standby: str,
    repeats: int,
    settings: list[str],
    obs_hz: float,
    double: bool = False,
) -> dict[str, Any]:
    """SIGKILL of the serving inference process to the next action from a new observation
    (seconds, each repeat), with `standby` (hot, spare, off); and stale actions after it.
    `double`: the standby process is killed with it (a double fault)."""
    times, stale, took_over = [], 0, 0
    with daemon(checkpoint, [*settings, f"supervision.standby={standby}"]) as (bind, status_at):
        with Driver(bind, spec, obs_hz) as driver:
            for _ in range(repeats):
                if standby != "off":  # steady state: the standby has finished starting
                    _wait(lambda: _process(status_at).get("standby_ready"), START_TIMEOUT_S,
                          "the standby was not ready")  # fmt: skip
                _wait(driver.served_lately, 60, "no action reached the robot")
                process = _process(status_at)
                pids = [process["pid"]]
                if double and process.get("standby_pid"):
                    pids.append(process["standby_pid"])
                seq = driver.last_seq()
                killed_ns = time.monotonic_ns()
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                first = driver.first_action_after(seq, START_TIMEOUT_S)
                if first is None:
                    raise SystemExit("bench_failover: no action after the kill")
                times.append((first.received_ns - killed_ns) / 1e9)
                index = driver.log.index(first)
                later = driver.log[index:]
                stale += sum(1 for r in later if r.kind == "action" and r.obs_seq <= seq)
                restarts = _process(status_at).get("restarts") or []
                took_over += sum(r.get("cause") == "standby_took_over" for r in restarts[-2:])
    return {
        "standby": f"{standby}, 2x" if double else standby,
        "kill_to_action_s": times,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "stale_actions_after_fault": stale,
        "taken_over": took_over,
    }


def _request_swap(status_at: str, new_checkpoint: Path, now: bool) -> dict[str, Any]:
    """Ask the daemon for a swap; its state once the new policy is built and checked."""
    reply = request_command(status_at, {"kind": "swap", "path": str(new_checkpoint),
                                        "now": now, "policy": None})  # fmt: skip
    if not reply or "error" in reply:
        raise SystemExit(f"bench_failover: the swap was refused: {reply}")
    return _wait(
        lambda: (s := _process(status_at).get("swap")) and s["phase"] != "building" and s,
        START_TIMEOUT_S,
        "the swap did not finish building",
    )


def swap(
    checkpoint: Path, new_checkpoint: Path, spec: Any, rate_hz: float, settings: list[str]
) -> dict[str, Any]:
    """`tempo swap --now` while a robot is served at `rate_hz` (observations every tick)."""
    sets = [*settings, f"control.rate_hz={rate_hz}"]
    with daemon(checkpoint, sets) as (bind, status_at):
        with Driver(bind, spec, rate_hz) as driver:
            _wait(driver.served_lately, 60, "no action reached the robot")
            time.sleep(1.0)  # steady state; then the missed ticks of as long without a swap
            quiet = request_status(status_at, 2.0) or {}
            quiet_started = time.monotonic()
            time.sleep(2.0)
            before = request_status(status_at, 2.0) or {}
            quiet_s = time.monotonic() - quiet_started
            lost_before = driver.client.counters.lost
            swap_started = time.monotonic()
            done = _request_swap(status_at, new_checkpoint, now=True)
            if done["phase"] != "done":
                raise SystemExit(f"bench_failover: the swap failed: {done['detail']}")
            # The switch, on this clock: the daemon stamps it with the wall clock.
            switched_ns = time.monotonic_ns() - int((time.time() - done["switched"]) * 1e9)
            sent = list(driver.sent.items())  # the driver's thread adds to it meanwhile
            seq = max((s for s, at in sent if at <= switched_ns), default=0)
            first = driver.first_action_after(seq, 60)
            time.sleep(1.0)
            after = request_status(status_at, 2.0) or {}
            swap_s = time.monotonic() - swap_started
            lost = driver.client.counters.lost - lost_before
            holds = [r for r in driver.log if r.kind == "hold" and r.received_ns >= switched_ns]
    return {
        "build_and_check_s": done["finished"] - done["started"],
        "missed_ticks": after.get("missed_ticks", 0) - before.get("missed_ticks", 0),
        # As many seconds without a swap, just before it: the machine's own missed ticks.
        "missed_ticks_without_swap": round(
            (before.get("missed_ticks", 0) - quiet.get("missed_ticks", 0)) * swap_s / quiet_s
        ),
        "lost_messages": lost,
        "holds_after_switch": len(holds),
        "first_new_action_after_switch_s": (
            (first.received_ns - switched_ns) / 1e9 if first is not None else None
        ),
        "period_s": 1.0 / rate_hz,
    }


def episode_swap(
    checkpoint: Path,
    new_checkpoint: Path,
    spec: Any,
    rate_hz: float,
    settings: list[str],
    episodes: int = 5,
) -> dict[str, Any]:
    """`tempo swap` (at the robot's next episode start) while a robot is served at `rate_hz`:
    episode start to its first action, before the swap and at the switch."""
    sets = [*settings, f"control.rate_hz={rate_hz}"]
    with daemon(checkpoint, sets) as (bind, status_at):
        with Driver(bind, spec, rate_hz) as driver:
            _wait(driver.served_lately, 60, "no action reached the robot")
            time.sleep(1.0)  # steady state
            baseline = []
            for _ in range(episodes):
                baseline.append(driver.episode_start_to_action(10.0))
                time.sleep(0.2)
            baseline_holds = max(holds for _, holds in baseline)
            before = request_status(status_at, 2.0) or {}
            lost_before, log_before = driver.client.counters.lost, len(driver.log)
            state = _request_swap(status_at, new_checkpoint, now=False)
            if state["phase"] != "switching":
                raise SystemExit(f"bench_failover: the swap is {state['phase']}: {state['detail']}")
            built_s = (state["switched"] or time.time()) - state["started"]
            time.sleep(0.5)  # the old policy goes on serving meanwhile
            at_switch, switch_holds = driver.episode_start_to_action(10.0)
            done = _wait(
                lambda: (s := _process(status_at).get("swap")) and s["phase"] != "switching" and s,
                30,
                "the swap did not end after the episode start",
            )
            if done["phase"] != "done":  # the robot is back on the old policy
                raise SystemExit(f"bench_failover: the swap failed: {done['detail']}")
            time.sleep(1.0)
            after = request_status(status_at, 2.0) or {}
            holds = [r for r in driver.log[log_before:] if r.kind == "hold"]  # starts' too
            lost = driver.client.counters.lost - lost_before
    return {
        "build_and_check_s": built_s,
        "episode_start_to_action_before_s": [seconds for seconds, _ in baseline],
        "episode_start_to_action_at_switch_s": at_switch,
        "holds_at_episode_start_before": baseline_holds,  # the most of any start before
        "holds_at_switch": switch_holds,
        "missed_ticks": after.get("missed_ticks", 0) - before.get("missed_ticks", 0),
        "lost_messages": lost,
        "holds": len(holds),
        "period_s": 1.0 / rate_hz,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=list(POLICIES), default="tiny")
    parser.add_argument("--repeats", type=int, default=3, help="kills per standby mode")
    parser.add_argument("--rate", type=float, default=200.0, help="the robot of the swap (Hz)")
    parser.add_argument("--obs-hz", type=float, default=50.0, help="observations, failover")
    parser.add_argument("--standby", action="append", choices=["hot", "spare", "off"],
                        help="modes to time (default: all three)")  # fmt: skip
    parser.add_argument("--double", action="store_true",
                        help="also kill serving and standby together, each mode")  # fmt: skip
    parser.add_argument("--no-swap", action="store_true")
    parser.add_argument("--no-episode-swap", action="store_true")
    parser.add_argument("--build", action="store_true",
                        help="tempo build both checkpoints first (serve loads them)")  # fmt: skip
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from policies.checkpoints.load import load_checkpoint  # this process only: torch is fine

    with tempfile.TemporaryDirectory(prefix="tempo-bench-ckpt-") as tmp:
        make = POLICIES[args.policy]
        served, swapped_in = make(Path(tmp) / "a", 0), make(Path(tmp) / "b", 1)
        spec = load_checkpoint(served).spec  # the robot the driver plays
        if args.build:  # the swapped-in checkpoint only when a swap runs
            swaps = not (args.no_swap and args.no_episode_swap)
            for checkpoint in (served, swapped_in) if swaps else (served,):
                seconds = build(checkpoint, args.overrides)
                print(f"tempo build {checkpoint.name}: {seconds:.1f} s", file=sys.stderr)
        results: dict[str, Any] = {"policy": args.policy, "failover": [], "swap": None,
                                   "episode_swap": None}  # fmt: skip
        for mode in args.standby or ["hot", "spare", "off"]:
            row = failover(served, spec, mode, args.repeats, args.overrides, args.obs_hz)
            results["failover"].append(row)
            if args.double and mode != "off":
                row = failover(served, spec, mode, args.repeats, args.overrides, args.obs_hz,
                               double=True)  # fmt: skip
                results["failover"].append(row)
        if not args.no_swap:
            results["swap"] = swap(served, swapped_in, spec, args.rate, args.overrides)
        if not args.no_episode_swap:
            results["episode_swap"] = episode_swap(served, swapped_in, spec, args.rate,
                                                   args.overrides)  # fmt: skip
    if args.json:
        print(json.dumps(results))
        return 0
    print(
        f"policy {args.policy}; SIGKILL of the inference process -> next action from a new "
        f"observation ({args.repeats} kills each, observations at {args.obs_hz:.0f} Hz)"
    )
    print(f"{'standby':10s}{'median s':>10s}{'max s':>10s}{'stale':>8s}{'taken over':>12s}")
    for row in results["failover"]:
        print(f"{row['standby']:10s}{row['median_s']:10.3f}{row['max_s']:10.3f}"
              f"{row['stale_actions_after_fault']:8d}{row['taken_over']:12d}")  # fmt: skip
    if (s := results["swap"]) is not None:
        first = s["first_new_action_after_switch_s"]
        print(f"swap --now under a {args.rate:.0f} Hz robot: built and checked in "
              f"{s['build_and_check_s']:.1f} s; missed ticks {s['missed_ticks']} (as long "
              f"without a swap: {s['missed_ticks_without_swap']}), lost "
              f"messages {s['lost_messages']}, holds after the switch {s['holds_after_switch']}, "
              f"first action from the new policy {first:.4f} s after the switch "
              f"(one period: {s['period_s']:.4f} s)")  # fmt: skip
    if (e := results["episode_swap"]) is not None:
        before = e["episode_start_to_action_before_s"]
        print(f"swap at the episode start under a {args.rate:.0f} Hz robot: "
              f"episode start -> its first action {e['episode_start_to_action_at_switch_s']:.4f} s "
              f"from the new policy, {statistics.median(before):.4f} s median "
              f"({min(before):.4f}-{max(before):.4f}) at {len(before)} episode starts before "
              f"(one period: {e['period_s']:.4f} s); holds in that wait {e['holds_at_switch']} "
              f"(at most {e['holds_at_episode_start_before']} before); from the swap to its "
              f"end: missed ticks {e['missed_ticks']}, lost messages {e['lost_messages']}, "
              f"holds {e['holds']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
