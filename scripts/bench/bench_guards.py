"""Per-tick cost of the control loop's pure stages: ensembler.action_at + teleop.mix + guards.check.

Runs one episode twice in the same process, each tick through Tempo's vectorised stages and
through a naive reference (ACT's all_time_actions table, per-joint Python loops for the mixer and
the guards), checks that both produce the same commands, and prints median and p99 per call in
microseconds. Defaults: 14 joints, chunk 100, a new chunk every step (ACT's query period 1), 200
Hz, every guard on, two joints handed to the operator and back every 100 ticks.

    python -m scripts.bench.bench_guards [--ticks 1000] [--joints 14] [--chunk 100] [--period 1]
"""

from __future__ import annotations

import argparse
import gc
import math
import time

import numpy as np

from controller.action.ensembler import ChunkEnsembler
from controller.action.guards import GuardChain, Verdict
from controller.action.guards_config import GuardsConfig
from controller.action.teleop import TeleopConfig, TeleopMixer
from controller.observe.percentiles import summarize

RATE_HZ = 200.0


# -- naive references -----------------------------------------------------------------------------


class TableEnsembler:
    """ACT's Algorithm 2 as in the paper's code: a table that grows with the episode."""

    def __init__(self, max_steps: int, chunk: int, dim: int, k: float) -> None:
        self.table = np.zeros((max_steps, max_steps + chunk, dim))
        self.populated = np.zeros((max_steps, max_steps + chunk), dtype=bool)
        self.chunk = chunk
        self.k = k

    def add_chunk(self, start: int, actions: np.ndarray, current: int) -> None:
        first = max(0, current - start)
        self.table[start, start + first : start + self.chunk] = actions[first:]
        self.populated[start, start + first : start + self.chunk] = True

    def action_at(self, step: int, out: np.ndarray) -> bool:
        rows = self.populated[:, step]
        actions = self.table[rows, step]
        if len(actions) == 0:
            return False
        weights = np.exp(-self.k * np.arange(len(actions)))
        weights /= weights.sum()
        out[:] = (actions * weights[:, None]).sum(axis=0)
        return True


class LoopMixer:
    """The teleop mixer, one joint at a time."""

    def __init__(self, n: int, owned: set[int], blend_ticks: int) -> None:
        self.n = n
        self.owned = set(owned)
        self.blend = blend_ticks
        self.pending: set[int] = set()
        self.offset = [0.0] * n
        self.left = [0] * n

    def set_owned(self, owned: set[int]) -> None:
        if self.blend:
            self.pending |= owned ^ self.owned
        self.owned = set(owned)

    def mix(self, policy, teleop, last, out) -> bool:
        for j in range(self.n):
            source = float(teleop[j]) if j in self.owned else float(policy[j])
            if j in self.pending and last is not None:
                self.offset[j] = float(last[j]) - source
                self.left[j] = self.blend
            if self.left[j] > 0:
                self.left[j] -= 1
                source += self.offset[j] * self.left[j] / self.blend
            out[j] = source
        self.pending.clear()
        return True


class LoopGuards:
    """The guard chain, one joint at a time (watchdog left out: it is O(1) either way)."""

    def __init__(self, lower, upper, max_step, max_dstep) -> None:
        self.lower, self.upper = list(lower), list(upper)
        self.max_step, self.max_dstep = list(max_step), list(max_dstep)
        self.last: list[float] | None = None
        self.last_step = [0.0] * len(lower)

    def seed(self, position) -> None:
        self.last = [float(x) for x in position]

    def check(self, proposed, out) -> Verdict:
        values = [float(x) for x in proposed]
        if not all(math.isfinite(x) for x in values):
            if self.last is None:
                return Verdict.HOLD
            values = list(self.last)
        result = []
        for j, x in enumerate(values):
            x = min(max(x, self.lower[j]), self.upper[j])
            if self.last is not None:
                last = self.last[j]
                x = min(max(x, last - self.max_step[j]), last + self.max_step[j])
                centre = last + self.last_step[j]
                y = min(max(x, centre - self.max_dstep[j]), centre + self.max_dstep[j])
                if y != x:
                    y = min(max(y, min(self.lower[j], last)), max(self.upper[j], last))
                x = y
            result.append(x)
        if self.last is not None:
            self.last_step = [x - last for x, last in zip(result, self.last, strict=True)]
        self.last = result
        out[:] = result
        return Verdict.ACTION


# -- the run --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument("--joints", type=int, default=14)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--period", type=int, default=1, help="a new chunk every N steps")
    args = parser.parse_args()
    n, chunk_size, ticks = args.joints, args.chunk, args.ticks

    names = [f"j{i}" for i in range(n)]
    rng = np.random.default_rng(0)
    # A smooth reference trajectory; each chunk is it plus a little noise.
    steps = np.arange(ticks + chunk_size)[:, None] / RATE_HZ
    path = 0.8 * np.sin(2 * np.pi * 0.3 * steps + rng.uniform(0, 6, n))
    teleop_path = 0.5 * np.cos(2 * np.pi * 0.2 * steps + rng.uniform(0, 6, n))
    limit = 0.7  # the path goes past it: the clamp works
    config = GuardsConfig(
        position_limits={name: (-limit, limit) for name in names},
        max_velocity=3.0,
        max_acceleration=300.0,
    )
    operator = {0, 1}

    guards = GuardChain(names, config, RATE_HZ)
    mixer = TeleopMixer(names, TeleopConfig(blend_s=0.1), RATE_HZ)
    ensembler = ChunkEnsembler(chunk_size, n, k=0.01)
    ref_ens = TableEnsembler(ticks, chunk_size, n, k=0.01)
    ref_mix = LoopMixer(n, set(), mixer.blend_ticks)
    ref_guards = LoopGuards(
        [-limit] * n, [limit] * n, [3.0 / RATE_HZ] * n, [300.0 / RATE_HZ**2] * n
    )
    seed = np.clip(path[0], -limit, limit)
    guards.seed(seed)
    ref_guards.seed(seed)

    action, command, sent = np.zeros(n), np.zeros(n), np.zeros(n)
    r_action, r_command, r_sent = np.zeros(n), np.zeros(n), np.zeros(n)
    timings: dict[str, list[int]] = {
        key: [] for key in ("add", "ens", "mix", "guard", "tick", "r_ens", "r_mix", "r_guard")
    }
    timings["r_tick"] = []
    clock = time.perf_counter_ns
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        for t in range(ticks):
            if t % args.period == 0:
                predicted = path[t : t + chunk_size] + rng.normal(0, 0.01, (chunk_size, n))
                a = clock()
                ensembler.add_chunk(t, predicted, current_step=t)
                timings["add"].append(clock() - a)
                ref_ens.add_chunk(t, predicted, current=t)
            if t % 100 == 50:
                owned = operator if t % 200 == 50 else set()
                mixer.set_owned(names[j] for j in owned)
                ref_mix.set_owned(owned)
            teleop = teleop_path[t]
            last = guards.last_action  # a read-only view, no copy

            a = clock()
            ensembler.action_at(t, action)
            b = clock()
            mixer.mix(action, teleop, last, command)
            c = clock()
            verdict = guards.check(command, 0, sent)
            d = clock()
            for key, value in (("ens", b - a), ("mix", c - b), ("guard", d - c), ("tick", d - a)):
                timings[key].append(value)

            r_last = np.array(ref_guards.last) if ref_guards.last is not None else None
            a = clock()
            ref_ens.action_at(t, r_action)
            b = clock()
            ref_mix.mix(r_action, teleop, r_last, r_command)
            c = clock()
            r_verdict = ref_guards.check(r_command, r_sent)
            d = clock()
            for key, value in (
                ("r_ens", b - a),
                ("r_mix", c - b),
                ("r_guard", d - c),
                ("r_tick", d - a),
            ):
                timings[key].append(value)

            if verdict is not r_verdict or not np.allclose(sent, r_sent, atol=1e-9):
                raise SystemExit(f"tick {t}: Tempo and the reference disagree: {sent} {r_sent}")
    finally:
        gc.enable()
        gc.unfreeze()

    print(
        f"{ticks} ticks, {n} joints, chunk {chunk_size}, a chunk every {args.period} step(s), "
        f"{RATE_HZ:g} Hz; outputs equal to the reference on every tick"
    )
    print(f"guard counters: {guards.counters}")
    print()
    print(
        f"{'stage (us per call)':<22}{'Tempo median':>14}{'p99':>9}{'naive median':>15}{'p99':>9}"
    )
    rows = [
        ("ensembler.action_at", "ens", "r_ens"),
        ("teleop.mix", "mix", "r_mix"),
        ("guards.check", "guard", "r_guard"),
        ("all three", "tick", "r_tick"),
    ]
    us = {key: summarize(ns, scale=1e-3) for key, ns in timings.items()}
    for label, ours, ref in rows:
        print(
            f"{label:<22}{us[ours].p50:>14.1f}{us[ours].p99:>9.1f}"
            f"{us[ref].p50:>15.1f}{us[ref].p99:>9.1f}"
        )
    print(f"{'add_chunk (per chunk)':<22}{us['add'].p50:>14.1f}{us['add'].p99:>9.1f}")


if __name__ == "__main__":
    main()
