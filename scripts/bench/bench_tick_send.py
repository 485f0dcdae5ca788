"""The tick's send of one `action`: the header packed once per robot and patched in place
(TickHeaders + RouterTransport.send_prepared, what the loop does) against encoding it on every
send (RouterTransport.send, the baseline), in the same run, over a real ROUTER to a DEALER.

Prints time per send and the bytes Python allocated per send (tracemalloc), with the ratio.

    python -m scripts.bench.bench_tick_send [--sends 20000] [--joints 14]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import zmq

from controller.daemon.tick_messages import TickHeaders
from controller.daemon.transport import RouterTransport


def _per_send(send: Callable[[int], bool], sends: int, drain: Callable[[], None]) -> float:
    started = time.perf_counter()
    for i in range(sends):
        send(i)
        if i % 500 == 499:
            drain()  # keep the peer's queue from filling (a full queue drops sends)
    return (time.perf_counter() - started) / sends


def _allocated(send: Callable[[int], bool], sends: int, drain: Callable[[], None]) -> float:
    tracemalloc.start()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    peak = 0
    for i in range(sends):
        tracemalloc.reset_peak()
        send(i)
        peak += tracemalloc.get_traced_memory()[1] - before
        if i % 500 == 499:
            drain()
    tracemalloc.stop()
    return peak / sends


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=20000)
    parser.add_argument("--joints", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    context = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="tempo-tick-") as tmp:
        transport = RouterTransport(context, f"ipc://{tmp}/tempo.sock")
        transport.open()
        driver = context.socket(zmq.DEALER)
        driver.setsockopt(zmq.IDENTITY, b"robot")
        driver.connect(transport.endpoint)
        driver.send(b"hello")  # the ROUTER learns the identity
        transport.socket.recv_multipart()

        def drain() -> None:
            while driver.poll(0):
                driver.recv_multipart()

        command = np.linspace(-1, 1, args.joints).astype(np.float32)
        headers = TickHeaders("session-1", args.joints)

        def encoded(i: int) -> bool:
            fields = {"session": "session-1", "step": i, "obs_seq": i, "deadline_ns": i}
            return transport.send(
                b"robot", "action", seq=i, fields=fields, arrays={"action": command}
            )

        def prepared(i: int) -> bool:
            header = headers.action(i, time.monotonic_ns(), i, i, i)
            return transport.send_prepared(b"robot", header, command)

        times: dict[str, list[float]] = {"encoded (baseline)": [], "prepared": []}
        for _ in range(args.rounds):  # interleaved, so both see the same machine state
            times["encoded (baseline)"].append(_per_send(encoded, args.sends, drain))
            times["prepared"].append(_per_send(prepared, args.sends, drain))
        memory = {
            "encoded (baseline)": _allocated(encoded, 2000, drain),
            "prepared": _allocated(prepared, 2000, drain),
        }
        drain()
        driver.close(0)
        transport.close()
    context.term()
    base = statistics.median(times["encoded (baseline)"])
    print(f"one action send, {args.joints} joints, median of {args.rounds} rounds of "
          f"{args.sends} sends")  # fmt: skip
    print(f"{'path':22s}{'us/send':>10s}{'x baseline':>12s}{'peak bytes/send':>18s}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:22s}{median * 1e6:10.2f}{median / base:12.2f}{memory[name]:18.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
