"""Round trip of one observation and its action: Tempo's zero-copy frames vs one packed frame.

The observation is 3 cameras of 480x640x3 uint8 plus 14 float32 joint values; the answer is a
14-float action. An echo server in a separate process decodes each observation (Tempo's strict
decoder, or msgpack.unpackb for the packed form) and answers. Both forms run in the same
invocation over ipc:// and tcp://127.0.0.1, so the ratio is measured on the same machine state.

    python -m scripts.bench.bench_transport [--iterations 500]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time

import msgpack
import numpy as np
import zmq

from controller.observe.percentiles import summarize
from controller.wire.protocol import decode, encode

CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")


def observation() -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(0)
    images = {name: rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for name in CAMERAS}
    return images, rng.standard_normal(14).astype(np.float32)


def tune(socket: zmq.Socket, sockbuf: int) -> None:
    socket.setsockopt(zmq.LINGER, 0)
    if sockbuf:
        socket.setsockopt(zmq.SNDBUF, sockbuf)
        socket.setsockopt(zmq.RCVBUF, sockbuf)


def serve(endpoint: str, form: str, bound: mp.Queue, sockbuf: int) -> None:
    socket = zmq.Context().socket(zmq.ROUTER)
    tune(socket, sockbuf)
    socket.bind(endpoint)  # tcp://127.0.0.1:* picks a free port: no probe-then-bind race
    bound.put(socket.getsockopt_string(zmq.LAST_ENDPOINT))
    action = np.zeros(14, dtype=np.float32)
    seq = 0
    while True:
        frames = socket.recv_multipart(copy=False)
        identity, body = frames[0], frames[1:]
        seq += 1
        if form == "tempo":
            message = decode(body)
            if message.kind == "bye":
                return
            action[:] = message.arrays["state"]
            reply = encode(
                "action",
                robot="bench",
                seq=seq,
                time_ns=time.monotonic_ns(),
                fields={"session": "s", "step": seq, "obs_seq": message.seq, "deadline_ns": 0},
                arrays={"action": action},
            )
            socket.send_multipart([identity, *reply], copy=False)
        else:
            message = msgpack.unpackb(body[0].bytes, raw=False)
            if message["kind"] == "bye":
                return
            state = np.frombuffer(message["state"], dtype=np.float32)
            packed = msgpack.packb({"kind": "action", "seq": seq, "action": state.tobytes()})
            socket.send_multipart([identity, packed])


def run_client(endpoint: str, form: str, iterations: int, sockbuf: int) -> np.ndarray:
    socket: zmq.Socket = zmq.Context.instance().socket(zmq.DEALER)
    tune(socket, sockbuf)
    socket.connect(endpoint)
    images, state = observation()
    times = np.zeros(iterations)
    for i in range(-20, iterations):  # the first 20 warm the connection up
        started = time.perf_counter_ns()
        if form == "tempo":
            frames = encode(
                "obs",
                robot="bench",
                seq=i + 100,
                time_ns=time.monotonic_ns(),
                fields={"session": "s"},
                arrays={**images, "state": state},
            )
            socket.send_multipart(frames, copy=False)
            reply = decode(socket.recv_multipart(copy=False))
            assert reply.arrays["action"][0] == state[0]  # noqa: S101 - benchmark self-check
        else:
            packed = msgpack.packb(
                {
                    "kind": "obs",
                    "seq": i,
                    **{k: v.tobytes() for k, v in images.items()},
                    "state": state.tobytes(),
                }
            )
            socket.send(packed)
            reply = msgpack.unpackb(socket.recv(), raw=False)
            np.frombuffer(reply["action"], dtype=np.float32)
        if i >= 0:
            times[i] = (time.perf_counter_ns() - started) / 1e6
    if form == "tempo":
        socket.send_multipart(
            encode("bye", robot="bench", seq=10**9, time_ns=0, fields={"session": "s"})
        )
    else:
        socket.send(msgpack.packb({"kind": "bye"}))
    socket.close()
    return times


def measure(endpoint: str, form: str, iterations: int, sockbuf: int) -> np.ndarray:
    bound: mp.Queue = mp.Queue()
    server = mp.Process(target=serve, args=(endpoint, form, bound, sockbuf), daemon=True)
    server.start()
    try:
        return run_client(bound.get(timeout=30), form, iterations, sockbuf)
    finally:
        server.join(5)
        if server.is_alive():
            server.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument(
        "--sockbuf", type=int, default=0, help="SNDBUF/RCVBUF bytes on both ends (0: OS default)"
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for transport in ("ipc", "tcp"):
            results = {}
            for form in ("packed", "tempo"):
                endpoint = f"ipc://{tmp}/{form}.sock" if transport == "ipc" else "tcp://127.0.0.1:*"
                results[form] = measure(endpoint, form, args.iterations, args.sockbuf)
            packed = summarize(results["packed"])
            for form in ("packed", "tempo"):
                t = summarize(results[form])
                rows.append((transport, form, t.p50, t.p99, packed.p50 / t.p50))
    print(
        f"round trip, 3 x 480x640x3 uint8 + 14 float32 -> 14 float32, {args.iterations} iterations"
    )
    print(f"{'transport':9s} {'form':28s} {'median ms':>10s} {'p99 ms':>8s} {'vs packed':>10s}")
    names = {"packed": "packed in one msgpack frame", "tempo": "tempo zero-copy frames"}
    for transport, form, median, p99, speedup in rows:
        print(f"{transport:9s} {names[form]:28s} {median:10.3f} {p99:8.3f} {speedup:9.2f}x")


if __name__ == "__main__":
    main()
