"""A good 50 Hz robot beside a flood: how much of its delay is the daemon's queueing, how much
CPU taken by the flooders.

Three modes in one run, each with a fresh daemon (`tempo serve`, the default reach policy, in
its own inference process) and the same good robot (its own process, an observation every
20 ms):

    no load     the daemon and the good robot only
    cpu theft   the same flood processes, sending to a plain ZeroMQ receiver that drops
                everything (no Tempo in it): the machine is as busy, the daemon is not asked
    flood       the same flood processes, sending to the daemon

The flood is three processes as fast as they can: valid observations on a session of their
own, random bytes, and a hello storm (a new connection per hello). The good robot's figures
come from its own clock: from sending an observation to receiving the first action computed
from it (the action's obs_seq), and the fraction of the daemon's ticks in its session's span
that brought it an action. The load's CPU (flooders and receiver, or flooders alone beside the
daemon) is printed so the two loaded modes can be compared.

    python scripts/bench/bench_flood.py [--seconds 10] [--set KEY=VALUE ...]

Run as a file, so that PYTHONPATH alone picks the Tempo tree measured (the daemon and robot
are run with this interpreter and environment).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

RATE_HZ = 50
JOINTS = [f"joint_{i}" for i in range(6)]
SPEC = {"joints": JOINTS, "cameras": [{"name": "front", "height": 96, "width": 128}],
        "state_size": 6}  # fmt: skip
FLOODS = ("obs", "junk", "hello")


# -- the good robot (a process of its own) ---------------------------------------------------


def good_robot(endpoint: str, seconds: float) -> None:
    """Streams at 50 Hz for `seconds`, then prints its figures as one JSON line."""
    import numpy as np

    from controller.wire.client import TempoClient

    sent_ns: dict[int, int] = {}
    latencies: list[float] = []
    seen: set[int] = set()
    steps: list[int] = []

    def on_command(command: Any, session: str) -> None:
        now = time.monotonic_ns()
        if command.kind != "action":
            return
        steps.append(command.step)
        seq = command.obs_seq
        if seq in sent_ns and seq not in seen:
            seen.add(seq)
            latencies.append((now - sent_ns[seq]) / 1e6)

    client = TempoClient(endpoint, "good", JOINTS, {"front": (96, 128)}, 6, on_command=on_command)
    client.connect()
    image = np.zeros((96, 128, 3), np.uint8)
    state = np.zeros(6, np.float32)
    print("ready", flush=True)
    sys.stdin.readline()
    first_step = None
    period = 1.0 / RATE_HZ
    started = time.monotonic()
    next_obs = started
    while time.monotonic() - started < seconds:
        now = time.monotonic()
        if now >= next_obs:
            seq = client.send_observation({"front": image.copy()}, state.copy())
            if seq is not None:
                sent_ns[seq] = time.monotonic_ns()
            next_obs += period
        client.receive(timeout_s=max(0.0, min(0.005, next_obs - time.monotonic())))
        if first_step is None and steps:
            first_step = steps[0]
    span = (steps[-1] - first_step + 1) if steps and first_step is not None else 0
    served = len({s for s in steps if first_step is not None and s >= first_step})
    client.close()
    print(json.dumps({"latencies_ms": latencies, "span": span, "served": served,
                      "sent": len(sent_ns), "reconnects": client.counters.reconnects}))  # fmt: skip


# -- the flood (processes of their own) -------------------------------------------------------


def flooder(endpoint: str, mode: str) -> None:
    """Sends as fast as it can until its stdin closes; prints how many it sent."""
    import threading

    import msgpack
    import numpy as np
    import zmq

    from controller.wire.protocol import encode

    context = zmq.Context()
    done = threading.Event()

    def wait_for_stdin() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=wait_for_stdin, daemon=True).start()

    def socket() -> Any:
        s = context.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        return s

    s = socket()
    session = "none"
    arrays: dict[str, Any] = {
        "front": np.zeros((96, 128, 3), np.uint8),
        "state": np.zeros(6, np.float32),
    }
    if mode == "obs":  # a session of its own (none from the plain receiver: sent all the same)
        s.send_multipart(encode("hello", robot="flood", seq=1, time_ns=time.monotonic_ns(),
                                fields={"spec": SPEC}))  # fmt: skip
        if s.poll(3000):
            header = msgpack.unpackb(s.recv_multipart()[0])
            session = header.get("session", session)
    print("ready", flush=True)
    rng = np.random.default_rng(0)
    sent, seq = 0, 1
    while not done.is_set():
        seq += 1
        if mode == "obs":
            frames = encode("obs", robot="flood", seq=seq, time_ns=time.monotonic_ns(),
                            fields={"session": session}, arrays=arrays)  # fmt: skip
        elif mode == "junk":
            frames = [rng.bytes(64)]
        else:  # hello storm: each hello on a new connection
            s.close(0)
            s = socket()
            frames = encode("hello", robot=f"storm{seq}", seq=1, time_ns=time.monotonic_ns(),
                            fields={"spec": SPEC})  # fmt: skip
        try:
            s.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            sent += 1
        except zmq.Again:
            pass
        if mode == "obs" and seq % 256 == 0:
            while s.poll(0):  # its welcome and errors: not left to pile up
                s.recv_multipart()
    s.close(0)
    print(sent, flush=True)


def sink(endpoint: str) -> None:
    """A plain receiver that drops everything (the CPU-theft mode's target)."""
    import zmq

    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVHWM, 0)
    router.bind(endpoint)
    print("ready", flush=True)
    while True:
        router.recv_multipart(copy=False)


# -- the run ----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux), its threads included."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_mode(mode: str, seconds: float, overrides: list[str]) -> dict[str, Any]:
    from controller.observe.status_server import request_status

    with tempfile.TemporaryDirectory(prefix="tempo-flood-") as tmp:
        endpoint, status = f"ipc://{tmp}/tempo.sock", f"ipc://{tmp}/status.sock"
        sets = [f"server.bind={endpoint}", f"server.status_bind={status}",
                f"control.rate_hz={RATE_HZ}", *overrides]  # fmt: skip
        log = open(f"{tmp}/daemon.log", "w")  # noqa: SIM115 - closed with the folder
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "serve",
                "--log-level",
                "WARNING",
                *sum((["--set", s] for s in sets), []),
            ],  # fmt: skip
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        load: list[subprocess.Popen[str]] = []
        try:
            deadline = time.monotonic() + 300
            while (before := request_status(status, 0.5)) is None:
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("bench_flood: the daemon did not start")
            robot = child("--good-robot", endpoint, str(seconds))
            if (
                robot.stdin is None
                or robot.stdout is None
                or robot.stdout.readline().strip() != "ready"
            ):
                raise SystemExit("bench_flood: the good robot did not connect")
            target = endpoint
            if mode == "cpu theft":
                target = f"ipc://{tmp}/sink.sock"
                load.append(child("--sink", target))
            if mode != "no load":
                load += [child("--flooder", target, kind) for kind in FLOODS]
            for process in load:
                if process.stdout is None or process.stdout.readline().strip() != "ready":
                    raise SystemExit("bench_flood: a load process did not start")
            measured: list[subprocess.Popen[Any]] = [daemon, *load]
            cpu_before = {p.pid: cpu_seconds(p.pid) for p in measured}
            floods = [p for p in load if p.args[-1] in FLOODS]  # type: ignore[index,operator]
            wall = time.monotonic()
            robot.stdin.write("go\n")
            robot.stdin.flush()
            out, _ = robot.communicate(timeout=seconds + 60)
            wall = time.monotonic() - wall
            load_cpu = sum(cpu_seconds(p.pid) - cpu_before[p.pid] for p in load) / wall
            daemon_cpu = (cpu_seconds(daemon.pid) - cpu_before[daemon.pid]) / wall
            after = request_status(status, 2.0) or {}
            sent: list[int] = []
            for process in floods:
                if process.stdin is not None:
                    process.stdin.close()
                    line = process.stdout.readline() if process.stdout else ""
                    sent.append(int(line) if line.strip().isdigit() else 0)
        finally:
            for process in load:
                process.kill()
                process.wait(5)
            daemon.terminate()
            daemon.wait(10)
            log.close()
        figures = json.loads(out.strip().splitlines()[-1])
        latencies = figures["latencies_ms"]
        counts = ("muted_messages_dropped", "over_rate_messages_dropped", "greetings_dropped",
                  "hellos_dropped")  # fmt: skip
        return {
            "p50": percentile(latencies, 0.50),
            "p99": percentile(latencies, 0.99),
            "served": figures["served"] / figures["span"] if figures["span"] else 0.0,
            "reconnects": figures["reconnects"],
            "missed": after.get("missed_ticks", 0) - before.get("missed_ticks", 0),
            "load_cpu": load_cpu,
            "daemon_cpu": daemon_cpu,
            "flood_sent": sum(sent),
            "dropped": sum(after.get(k, 0) - before.get(k, 0) for k in counts),
            "messages": after.get("messages", 0) - before.get("messages", 0),
        }


ROWS = [
    ("obs -> action p50 (ms)", "p50", "{:.1f}"),
    ("obs -> action p99 (ms)", "p99", "{:.1f}"),
    ("ticks served", "served", "{:.1%}"),
    ("good robot reconnects", "reconnects", "{}"),
    ("pacer missed ticks", "missed", "{}"),
    ("load CPU (cores)", "load_cpu", "{:.2f}"),
    ("daemon CPU (cores)", "daemon_cpu", "{:.2f}"),
    ("flood messages sent", "flood_sent", "{}"),
    ("daemon messages handled", "messages", "{}"),
    ("  dropped by budgets", "dropped", "{}"),
]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--good-robot":
        good_robot(sys.argv[2], float(sys.argv[3]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--flooder":
        flooder(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--sink":
        sink(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    loads = os.getloadavg()
    results = {m: run_mode(m, args.seconds, args.overrides) for m in
               ("no load", "cpu theft", "flood")}  # fmt: skip
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"good robot at {RATE_HZ} Hz for {args.seconds:.0f} s per mode; {os.cpu_count()} CPUs; "
          f"flood: {', '.join(FLOODS)} (one process each); load average before "
          f"{loads[0]:.1f}, after {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'':26s}" + "".join(f"{mode:>12s}" for mode in results))
    for label, key, fmt in ROWS:
        cells = ["n/a" if r[key] is None else fmt.format(r[key]) for r in results.values()]
        print(f"{label:26s}" + "".join(f"{cell:>12s}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
