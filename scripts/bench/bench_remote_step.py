"""One policy step in the daemon's process against the same step through the inference process
(observation copied into a shared, pinned slot by the control side, chunk back over ipc), and
through the inference process with frames a same-host driver wrote in place.

All are timed in this one run on the same observations: the in-process Runner's `predict`
(host arrays -> upload -> model -> download), then RemotePolicy's `predict` (slot write ->
request -> the same runner in the inference process -> reply), then RemotePolicy's `predict` on
frames already in a driver's ring slot (as the daemon hands them on: request naming the slot ->
the inference process uploads from the driver's pinned slot -> reply -> the generation check).
For both, "inside the inference process" is the step as that process times it (request taken ->
chunk in its host memory); the rest of the round trip is the two trips between the processes,
each timed on the one clock both processes read (the trip there includes the control side's
request, and for the slot path its copy of the frames into the slot).
The driver's own write into its slot (its camera's business) is not timed. ACT at LeRobot's
ALOHA defaults (3 cameras 480x640, 14 joints, chunk 100), random weights, or `--tiny` for a
quick CPU run.

`--period-ms` starts the steps that far apart, as a camera's rate does (back to back by
default): between steps the inference process then sleeps, unless supervision.busy_poll_ms
keeps it polling (`--set supervision.busy_poll_ms=50`).

    python -m scripts.bench.bench_remote_step [--iters 300] [--cache-dir DIR] [--tiny] [--set K=V]
                                        [--period-ms MS]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from controller.app import inference_process
from controller.config import load_config
from controller.daemon.pacer import Pacer
from controller.daemon.registry import DRIVER_RING_SLOTS
from controller.inference.build import build_policy
from controller.inference.examples import random_observation
from controller.link.remote_policy import RemotePolicy
from controller.observe.percentiles import summarize
from controller.process_protocol.frame_slots import FrameSlots
from controller.wire.slot_ring import SlotFrames
from policies.base import Policy, window_context
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_aloha_policy, make_demo_policy

Samples = dict[str, np.ndarray]  # ms per step: round trip, inside, the trip there, the trip back


class _Recorder:
    """Each step's round trip, and for a RemotePolicy its parts as the two processes saw them."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self.rows: dict[str, list[float]] = {"round": [], "inside": [], "there": [], "back": []}

    def add(self, round_trip_ms: float) -> None:
        step_ns = getattr(self._policy, "last_step_ns", None)
        trips = getattr(self._policy, "last_trips_ns", None) or (None, None)
        self.rows["round"].append(round_trip_ms)
        for key, ns in (("inside", step_ns), ("there", trips[0]), ("back", trips[1])):
            self.rows[key].append(ns / 1e6 if ns is not None else float("nan"))

    def samples(self) -> Samples:
        return {key: np.array(values) for key, values in self.rows.items()}


def pace(period_ms: float) -> Callable[[], object]:
    """A wait for the next step's start, `period_ms` apart on the daemon's own pacer (sleeping,
    no spin); at 0 it does not wait."""
    if period_ms <= 0:
        return lambda: None
    pacer = Pacer(round(period_ms * 1e6), spin_ns=0)
    pacer.start()
    return pacer.wait


def time_steps(policy: Policy, observations: list, iterations: int, period_ms: float) -> Samples:  # type: ignore[type-arg]
    recorder = _Recorder(policy)
    wait = pace(period_ms)
    for i in range(iterations + 20):
        wait()
        images, state = observations[i % len(observations)]
        began = time.perf_counter()
        policy.predict(images, window_context(state))
        if i >= 20:  # warm-up
            recorder.add((time.perf_counter() - began) * 1e3)
    return recorder.samples()


def time_in_place(
    policy: RemotePolicy,
    observations: list,  # type: ignore[type-arg]
    iterations: int,
    period_ms: float,
) -> tuple[Samples, str]:
    """Steps on frames in a driver's ring, as the daemon serves an observation written in place
    (the ring is made as the dispatcher makes a session's); and whether the ring was pinned."""
    ring = FrameSlots.create(policy.spec, DRIVER_RING_SLOTS)
    names = [c.name for c in policy.spec.cameras]
    recorder = _Recorder(policy)
    wait = pace(period_ms)
    try:
        for i in range(iterations + 20):
            images, state = observations[i % len(observations)]
            index = i % ring.count
            generation = ring.write(index, images, np.zeros_like(ring.views(index)[1]))
            wait()  # the driver wrote the frames as they came; the step starts on time
            frames = SlotFrames(ring, index, generation, names)
            began = time.perf_counter()
            policy.predict(frames, window_context(state))
            if not frames.unchanged():
                raise RuntimeError("the slot changed during the step")
            if i >= 20:
                recorder.add((time.perf_counter() - began) * 1e3)
            del frames
        process = policy.status().get("process") or {}
        pinned = f"{process.get('pinned_driver_rings')} of {process.get('driver_rings')}"
    finally:
        ring.close()
    return recorder.samples(), pinned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--tiny", action="store_true", help="a small ACT (CPU-friendly)")
    parser.add_argument(
        "--period-ms", type=float, default=0.0,
        help="start the steps this far apart (33.3: a 30 Hz camera); 0: back to back",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[],
        help="a config override, e.g. runner.cudnn_benchmark=true (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tempo-bench-") as tmp:
        policy = make_demo_policy() if args.tiny else make_aloha_policy()
        save_checkpoint(Path(tmp) / "ckpt", policy)
        overrides = ["policy.kind=checkpoint", f"policy.path={tmp}/ckpt"]
        if args.cache_dir:
            overrides.append(f"runner.cache_dir={args.cache_dir}")
        overrides += args.overrides
        config = load_config(None, overrides)
        observations = [random_observation(policy.spec, seed) for seed in range(8)]
        local = build_policy(config.policy, config.robot, config.runner)
        in_process = time_steps(local, observations, args.iters, args.period_ms)
        status = local.status()
        device, tier = status["device"], status["tier"]
        del local
        remote = inference_process(config)
        try:
            remote.start()
            separate = time_steps(remote, observations, args.iters, args.period_ms)
            in_place, rings_pinned = time_in_place(remote, observations, args.iters, args.period_ms)
            pinned = remote.pinned
        finally:
            remote.stop()
    settings = ", ".join(args.overrides) or "default settings"
    pacing = f"every {args.period_ms:g} ms" if args.period_ms > 0 else "back to back"
    print(f"{device}, tier {tier}, {settings}, {args.iters} steps each, {pacing} (ms)")
    print(f"{'':50s}{'p50':>10s}{'p99':>10s}{'mean':>10s}")
    inside = "  of which inside the inference process"
    rows = [
        ("in the daemon's process", in_process["round"]),
        ("through the inference process", separate["round"]),
        ("  of which the trip there (frames into the slot)", separate["there"]),
        (inside, separate["inside"]),
        ("  of which the trip back", separate["back"]),
        ("frames in place (same host)", in_place["round"]),
        ("  of which the trip there", in_place["there"]),
        (inside, in_place["inside"]),
        ("  of which the trip back", in_place["back"]),
    ]
    for label, samples in rows:
        s = summarize(samples)
        print(f"{label:50s}{s.p50:10.3f}{s.p99:10.3f}{s.mean:10.3f}")
    print(f"observation slots pinned for DMA: {pinned}; driver rings pinned: {rings_pinned}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
