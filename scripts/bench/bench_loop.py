"""Tick lateness of the daemon's control loop while its worker thread runs a CPU-heavy policy.

A real daemon (in this process) serves a simulated robot (a separate process, observations at
200 Hz); the policy burns CPU for `--policy-ms` per inference, so the inference thread is busy
all the time. Two pacing modes run in the same invocation: plain sleep to the deadline (the
baseline, control.spin_us=0) and Tempo's sleep-then-spin (the default).

    python -m scripts.bench.bench_loop [--seconds 30] [--rate 200] [--policy-ms 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

import torch

from controller.config import load_config
from controller.daemon.service import Daemon
from controller.feed.served_policy import served_here
from controller.inference.build import build_policy
from controller.observe.histogram import window
from controller.observe.instruments import Section
from controller.observe.telemetry import TICK_LATENESS


class BusyPolicy:
    """Wraps a policy and keeps the CPU busy in torch (as a real CPU model would) for a while."""

    def __init__(self, inner, busy_ms: float) -> None:
        self.inner = inner
        self.busy_s = busy_ms / 1e3
        self.spec = inner.spec
        self._a = torch.randn(128, 128)

    def predict(self, images, context):
        end = time.perf_counter() + self.busy_s
        while time.perf_counter() < end:
            self._a = torch.tanh(self._a @ self._a)
        return self.inner.predict(images, context)


def run(mode: str, seconds: float, rate: float, busy_ms: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            f"server.bind=ipc://{tmp}/tempo.sock",
            f"server.status_bind=ipc://{tmp}/status.sock",
            f"control.rate_hz={rate}",
        ]
        if mode == "sleep":
            overrides.append("control.spin_us=0")
        config = load_config(None, overrides)
        policy = build_policy(config.policy, config.robot, config.runner)
        daemon = Daemon(config, served_here(BusyPolicy(policy, busy_ms)))
        daemon.start()
        robot = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "sim-robot",
                *sum((["--set", o] for o in overrides), []),
                "--seconds",
                str(seconds + 2),
                "--camera-hz",
                str(rate),
                "--json-lines",
            ],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(2.0)  # connect and settle; then measure from a clean window
        ticks0, missed0, inferences0 = (
            daemon.pacer.step,
            daemon.pacer.missed_ticks,
            daemon.lanes.default.feed.inferences,
        )
        # Every tick's lateness is in the daemon's histogram; the run is the difference.
        lateness_section = daemon.telemetry.section(TICK_LATENESS)
        if not isinstance(lateness_section, Section):  # what the run reads its lateness from
            raise SystemExit("bench_loop reads the tick lateness from telemetry, which is off")
        before = lateness_section.snapshot(buckets=True)
        time.sleep(seconds)
        lateness = window(before, lateness_section.snapshot(buckets=True))
        result = {
            "mode": mode,
            "ticks": daemon.pacer.step - ticks0,
            "missed": daemon.pacer.missed_ticks - missed0,
            "inferences": daemon.lanes.default.feed.inferences - inferences0,
            "p50": lateness["p50_s"] * 1e6,
            "p99": lateness["p99_s"] * 1e6,
            "max": lateness["max_s"] * 1e6,
            "robots": len(daemon.lanes.default.control.registry.sessions),
        }
        daemon.stop()
        robot.wait(10)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--policy-ms", type=float, default=4.0)
    args = parser.parse_args()
    rows = [run(mode, args.seconds, args.rate, args.policy_ms) for mode in ("sleep", "sleep+spin")]
    print(
        f"tick lateness at {args.rate:.0f} Hz for {args.seconds:.0f} s, inference thread busy "
        f"({args.policy_ms} ms CPU per inference), 1 simulated robot"
    )
    print(
        f"{'pacing':12s} {'ticks':>6s} {'missed':>6s} {'infer':>6s} "
        f"{'p50 us':>8s} {'p99 us':>8s} {'max us':>8s}"
    )
    for r in rows:
        print(
            f"{r['mode']:12s} {r['ticks']:6d} {r['missed']:6d} {r['inferences']:6d} "
            f"{r['p50']:8.1f} {r['p99']:8.1f} {r['max']:8.1f}"
        )
    base, tempo = rows
    print(
        f"p99 lateness: sleep+spin is {base['p99'] / max(tempo['p99'], 1e-9):.1f}x lower "
        "than plain sleep"
    )


if __name__ == "__main__":
    main()
