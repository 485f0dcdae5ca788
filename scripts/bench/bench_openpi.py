"""Round trip of one openpi request: Tempo's openpi endpoint against openpi's own websocket
server, in the same run, on loopback; and the same observation through Tempo's ZeroMQ client.

The observation is openpi's ALOHA layout with three cameras, (3, 224, 224) uint8 each, 14
float64 joint values and a prompt; the answer is a (50, 14) float32 chunk. Every variant is
driven by openpi-client's WebsocketClientPolicy (the ZeroMQ one by TempoClient), from this
process, against a server process of its own:

    openpi        openpi's `WebsocketPolicyServer` (imported from the checkout given, never
                  copied here) serving a trivial policy that returns a zero chunk
    tempo         `tempo serve`, the scripted reach policy (a chunk costs microseconds) in its
                  inference process (the default), openpi endpoint with a custom 3-camera layout
    tempo-inproc  the same with supervision.inference_process=false
    endpoint      Tempo's websocket server alone (controller.openpi.websocket_server: decode,
                  the layout's checks, encode) with a backend that answers a zero chunk at
                  once: the protocol's share, beside openpi's server doing the same
    tempo-zmq     the first daemon, through TempoClient: from an observation sent to the first
                  action computed from it (the daemon sends actions at its ticks, so this
                  includes up to one control period, 5 ms at the 200 Hz set here)

Variants alternate in blocks (rounds), so that each sees the same machine state.

    git --git-dir=/work/.mirror/Physical-Intelligence+openpi/repo archive HEAD src/openpi \\
        | tar -x -C /tmp/openpi
    python -m scripts.bench.bench_openpi --openpi /tmp/openpi [--requests 600] [--rounds 6]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from controller.observe.percentiles import summarize

CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")
JOINTS = 14
CHUNK = 50
SIZE = 224
RATE_HZ = 200


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def observation() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    images = {name: rng.integers(0, 256, (3, SIZE, SIZE), dtype=np.uint8) for name in CAMERAS}
    return {"images": images, "state": rng.standard_normal(JOINTS), "prompt": "fold the towel"}


def serve_openpi(checkout: Path, port: int) -> None:
    """The child: openpi's own server, from the checkout, with a trivial policy."""
    sys.path.insert(0, str(checkout / "src"))
    from openpi.serving.websocket_policy_server import WebsocketPolicyServer  # type: ignore
    from openpi_client.base_policy import BasePolicy

    chunk = np.zeros((CHUNK, JOINTS), np.float32)

    class Trivial(BasePolicy):  # type: ignore[misc]
        def infer(self, obs: dict) -> dict:  # type: ignore[type-arg]
            return {"actions": chunk}

    WebsocketPolicyServer(Trivial(), host="127.0.0.1", port=port, metadata={}).serve_forever()


def serve_endpoint(port: int) -> None:
    """The child: Tempo's websocket server alone, answering a zero chunk at once."""
    from controller.openpi.layouts import Layout
    from controller.openpi.websocket_server import Answer, OpenpiServer, ServerSettings

    chunk = np.zeros((CHUNK, JOINTS), np.float32)

    class Client:
        def submit(self, request: Any, done: Callable[[Answer], None]) -> None:
            done(Answer(actions=chunk))

        def finish(self, request: Any, answer: Answer) -> Answer:
            return answer

        def cancel(self) -> None: ...

        def refused(self, code: str) -> None: ...

        def close(self) -> None: ...

    class Backend:
        def check_room(self) -> None:
            pass  # always room: the benchmark's one client

        def open(self, peer: str) -> Client:
            return Client()

        def metadata(self) -> dict[str, Any]:
            return {}

    images = tuple(f"images/{c}" for c in CAMERAS)
    layout = Layout("custom", images, True, ("state",), {f"images/{c}": c for c in CAMERAS})
    cameras = {c: (SIZE, SIZE) for c in CAMERAS}
    settings = ServerSettings("127.0.0.1", port, layout, cameras, JOINTS, max_requests_per_s=1e4)
    OpenpiServer(Backend(), settings).start()
    while True:
        time.sleep(3600)


def tempo_args(directory: Path, port: int, in_process: bool) -> list[str]:
    cameras = ", ".join(f"{{name: {c}, height: {SIZE}, width: {SIZE}}}" for c in CAMERAS)
    mapping = ", ".join(f"images/{c}: {c}" for c in CAMERAS)
    settings = [
        f"server.bind=ipc://{directory}/tempo.sock",
        f"server.status_bind=ipc://{directory}/status.sock",
        f"control.rate_hz={RATE_HZ}",
        "server.session_timeout_s=3600",  # the ZeroMQ robot waits while the others run
        "policy.kind=reach",
        f"policy.reach.chunk_size={CHUNK}",
        f"robot.joints=[{', '.join(f'j{i}' for i in range(JOINTS))}]",
        f"robot.cameras=[{cameras}]",
        "server.openpi.enabled=true",
        f"server.openpi.bind=127.0.0.1:{port}",
        "server.openpi.layout=custom",
        f"server.openpi.cameras={{{mapping}}}",
        "server.openpi.state=[state]",
        "server.openpi.channels_first=true",
        "server.openpi.max_requests_per_s=10000",
        f"supervision.inference_process={'false' if in_process else 'true'}",
    ]
    args = [sys.executable, "-m", "controller.cli", "serve", "--log-level", "WARNING"]
    for setting in settings:
        args += ["--set", setting]
    return args


@contextlib.contextmanager
def process(args: list[str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A server process, ready once its /healthz answers."""
    with open(log, "wb") as out:
        child = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            if child.poll() is not None:
                raise SystemExit(f"{args[2:4]} exited at start:\n{log.read_text()}")
            try:
                url = f"http://127.0.0.1:{port}/healthz"
                with urllib.request.urlopen(url, timeout=1) as answer:  # noqa: S310 (loopback)
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{args[2:4]} did not answer /healthz within 180 s")
            time.sleep(0.2)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()


def openpi_round_trip(port: int) -> tuple[Callable[[], int], list[float]]:
    """One request through openpi-client; the server's infer_ms of each kept beside it."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    client = WebsocketClientPolicy("127.0.0.1", port)
    obs = observation()
    infer_ms: list[float] = []

    def once() -> int:
        began = time.perf_counter_ns()
        reply = client.infer(obs)
        elapsed = time.perf_counter_ns() - began
        if reply["actions"].shape != (CHUNK, JOINTS):
            raise SystemExit(f"port {port} answered a chunk of {reply['actions'].shape}")
        infer_ms.append(reply["server_timing"]["infer_ms"])
        return elapsed

    return once, infer_ms


def zmq_round_trip(directory: Path) -> Callable[[], int]:
    """An observation through TempoClient until the first action computed from it."""
    from controller.wire.client import TempoClient

    obs = observation()
    images = {name: np.ascontiguousarray(a.transpose(1, 2, 0)) for name, a in obs["images"].items()}
    state = obs["state"].astype(np.float32)
    client = TempoClient(
        f"ipc://{directory}/tempo.sock",
        "bench",
        [f"j{i}" for i in range(JOINTS)],
        {name: (SIZE, SIZE) for name in CAMERAS},
        JOINTS,
        handshake_timeout_s=30,
        # It waits unread while the other variants run: no reconnect for that silence.
        silence_reconnect_s=3600,
        frames_in_place=False,
    )
    client.connect()

    def once() -> int:
        """As a robot streams: the observation again every 50 ms until an action computed from
        one of them comes; the time from sending that one."""
        client.receive()  # what queued meanwhile, drained before the clock starts
        sent: dict[int, int] = {}
        began = time.perf_counter_ns()
        while time.perf_counter_ns() < began + 10_000_000_000:
            seq = client.send_observation(images, state)
            if seq is None:
                raise SystemExit("the ZeroMQ client is not connected")
            sent[seq] = time.perf_counter_ns()
            resend = sent[seq] + 50_000_000
            while (now := time.perf_counter_ns()) < resend:
                command = client.receive(timeout_s=(resend - now) / 1e9)
                if command.kind == "action" and command.obs_seq in sent:
                    return time.perf_counter_ns() - sent[command.obs_seq]
        raise SystemExit(f"no action from observations {sorted(sent)} within 10 s")

    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openpi", type=Path, required=True, help="an openpi checkout (src/)")
    parser.add_argument("--requests", type=int, default=600, help="per variant, after warm-up")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--serve-openpi", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-endpoint", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_openpi is not None:
        serve_openpi(args.openpi, args.serve_openpi)
        return
    if args.serve_endpoint is not None:
        serve_endpoint(args.serve_endpoint)
        return
    server = args.openpi / "src" / "openpi" / "serving" / "websocket_policy_server.py"
    if not server.is_file():
        raise SystemExit(f"{server} is missing: --openpi must be an openpi checkout")

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        names = ("openpi", "endpoint", "tempo", "tempo-inproc")
        ports = {name: free_port() for name in names}
        own = [sys.executable, "-m", "scripts.bench.bench_openpi", "--openpi", str(args.openpi)]
        for name, flag in (("openpi", "--serve-openpi"), ("endpoint", "--serve-endpoint")):
            port = ports[name]
            stack.enter_context(process([*own, flag, str(port)], port, root / f"{name}.log"))
        for name, in_process in (("tempo", False), ("tempo-inproc", True)):
            directory = root / name
            directory.mkdir()
            stack.enter_context(
                process(
                    tempo_args(directory, ports[name], in_process),
                    ports[name],
                    root / f"{name}.log",
                )  # fmt: skip
            )
        variants: dict[str, Callable[[], int]] = {}
        infer: dict[str, list[float]] = {}
        for name in names:
            variants[name], infer[name] = openpi_round_trip(ports[name])
        variants["tempo-zmq"] = zmq_round_trip(root / "tempo")

        for name, once in variants.items():  # warm-up: first connections, first steps
            print(f"warming up {name}", file=sys.stderr)
            for _ in range(30):
                once()
        for series in infer.values():
            series.clear()
        samples: dict[str, list[int]] = {name: [] for name in variants}
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            for name, once in variants.items():
                samples[name] += [once() for _ in range(per_round)]

    base = summarize(samples["openpi"], 1e-6)
    print(
        f"one request, ALOHA layout, 3 cameras (3, {SIZE}, {SIZE}) uint8 + {JOINTS} float64 + "
        f"prompt -> a ({CHUNK}, {JOINTS}) float32 chunk; loopback, {os.cpu_count()} CPUs; "
        f"{per_round * args.rounds} requests per variant in {args.rounds} alternating rounds"
    )
    print(
        "| server | round trip p50 | p90 | p99 | p50 / openpi's | server's infer_ms p50 |\n"
        "| --- | --- | --- | --- | --- | --- |"
    )
    for name, values in samples.items():
        stats = summarize(values, 1e-6)
        step = f"{np.median(infer[name]):.3f} ms" if infer.get(name) else "-"
        print(
            f"| {name} | {stats.p50:.3f} ms | {stats.p90:.3f} ms | {stats.p99:.3f} ms | "
            f"{stats.p50 / base.p50:.2f}x | {step} |"
        )


if __name__ == "__main__":
    main()
