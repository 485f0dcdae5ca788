"""One policy step through the local inference process (socket pair, frames in shared memory)
against the same step through the remote link on loopback (`tempo infer-server` on this host,
CurveZMQ over TCP, frames inline), in one run on the same observations and checkpoint.

For the remote link, "inside" is the step as the server's inference process timed it, and the
trips there and back are reckoned on this host's clock (the relay moves the server's stamps
onto it by the link's clock offset; on loopback the offset is about zero). ACT at LeRobot's
ALOHA defaults (3 cameras 480x640, 14 joints, chunk 100), random weights, or `--tiny`.

    python -m scripts.bench.bench_remote_link [--iters 300] [--tiny] [--period-ms MS] [--set K=V]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from controller.app import inference_process
from controller.config import load_config
from controller.inference.examples import random_observation
from controller.observe.percentiles import summarize
from controller.wire.keys import generate_keys
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_aloha_policy, make_demo_policy
from scripts.bench.bench_remote_step import time_steps


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--tiny", action="store_true", help="a small ACT (CPU-friendly)")
    parser.add_argument("--period-ms", type=float, default=0.0, help="0: back to back")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tempo-bench-") as tmp:
        policy = make_demo_policy() if args.tiny else make_aloha_policy()
        save_checkpoint(Path(tmp) / "ckpt", policy)
        overrides = ["policy.kind=checkpoint", f"policy.path={tmp}/ckpt", *args.overrides]
        observations = [random_observation(policy.spec, seed) for seed in range(8)]
        local = inference_process(load_config(None, [*overrides, "supervision.standby=false"]))
        try:
            local.start()
            through_pair = time_steps(local, observations, args.iters, args.period_ms)
        finally:
            local.stop()
        server_public, server_secret = generate_keys(Path(tmp) / "server", "server")
        robot_public, robot_secret = generate_keys(Path(tmp) / "robot", "robot")
        allowed = Path(tmp) / "allowed"
        allowed.mkdir()
        (allowed / robot_public.name).write_bytes(robot_public.read_bytes())
        port = _free_port()
        server_args = [sys.executable, "-m", "controller.cli", "infer-server"]
        server_args += ["--bind", f"tcp://127.0.0.1:{port}"]
        for override in [
            *overrides,
            f"security.server_secret_key={server_secret}",
            f"security.authorized_keys={allowed}",
        ]:
            server_args += ["--set", override]
        server = subprocess.Popen(server_args)
        remote_config = load_config(None, [
            *overrides, "supervision.standby=false",
            f"policy.remote.address=tcp://127.0.0.1:{port}",
            f"policy.remote.server_key={server_public}",
            f"policy.remote.client_key={robot_secret}",
        ])  # fmt: skip
        remote = inference_process(remote_config)
        try:
            time.sleep(1.0)  # the server binds
            remote.start()
            over_tcp = time_steps(remote, observations, args.iters, args.period_ms)
            link = remote.status().get("link") or {}
        finally:
            remote.stop()
            server.terminate()
            server.wait(30)
    pacing = f"every {args.period_ms:g} ms" if args.period_ms > 0 else "back to back"
    print(f"{'tiny ACT' if args.tiny else 'ACT-ALOHA'}, {args.iters} steps each, {pacing} (ms)")
    print(f"{'':46s}{'p50':>10s}{'p99':>10s}{'mean':>10s}")
    rows = [
        ("local inference process (socket pair)", through_pair["round"]),
        ("  of which inside the inference process", through_pair["inside"]),
        ("remote link, loopback TCP, raw frames", over_tcp["round"]),
        ("  of which the trip there", over_tcp["there"]),
        ("  of which inside the inference process", over_tcp["inside"]),
        ("  of which the trip back", over_tcp["back"]),
    ]
    for label, samples in rows:
        s = summarize(samples)
        print(f"{label:46s}{s.p50:10.3f}{s.p99:10.3f}{s.mean:10.3f}")
    print(f"link: {link}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
