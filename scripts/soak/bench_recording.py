"""The flight recorder's cost to the control loop: recording off, continuous and ring, in turn,
in one run, on the same workload.

Each run is scripts/soak/soak.py's (a daemon and a simulated robot at `--rate`, frames at
`--camera-hz`, `--load` busy processes beside them) with `record.mode` set; the modes alternate
(off, continuous, ring, off, continuous, ring, ...) `--repeats` times, so machine drift spreads
over all of them and the baseline is measured in the same run. Per run: tick lateness p50/p99/max
and missed ticks (the daemon's whole-run histograms), the records the daemon queued, wrote and
dropped (by kind, from its status), and the MB the recording left on disk (ring mode writes only
on a mark or a guard stop, which this workload does not make: its cost is the memory it keeps).

    python -m scripts.soak.bench_recording --rate 200 --cameras 3 --height 480 --width 640 \\
        --camera-hz 30 --seconds 60 --repeats 2 [--policy act|reach|CHECKPOINT_DIR] [--json]

--policy act (the default) serves the demo ACT (random weights) made for the requested cameras,
with the settings a CPU keeps up with where there is no CUDA GPU (controller.sim.demo_fit);
reach is the scripted policy (no model, the cameras from --cameras); a checkpoint directory is
served as it is, with its own cameras (--cameras/--height/--width then do not apply).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller.observe.status_server import request_status
from scripts.soak.soak import soak

MODES = ("off", "continuous", "ring")
POLL_S = 0.5  # how often the daemon's status (recording counts, lateness p50) is read


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="control rate (Hz)")
    parser.add_argument("--cameras", type=int, default=3, help="cameras of the robot")
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--camera-hz", type=float, default=30.0, help="new frames per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each run")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each mode")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, in the order they alternate (default {','.join(MODES)})",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        help="seconds of a first run (recording off) that is not counted: the first daemon "
        "start of a run can miss more ticks than the rest",
    )
    parser.add_argument("--load", type=int, default=0, help="background busy processes")
    parser.add_argument("--policy", default="act", help="act (default), reach, or a checkpoint")
    parser.add_argument("--frames", choices=("raw", "downscale", "jpeg"), default="raw")
    parser.add_argument(
        "--record-dir",
        type=Path,
        default=None,
        help="where the recordings go (each run's are deleted after it is measured); default "
        "a temporary directory: its disk is part of what is measured",
    )
    parser.add_argument(
        "--frames-on-socket",
        action="store_true",
        help="the robot sends its frames on the socket instead of writing them in place",
    )
    parser.add_argument(
        "--flat-frames",
        action="store_true",
        help="the simulated robot's flat bars (compress to almost nothing) instead of frames "
        "with a sensor-noise texture that compress as a camera's do",
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown or not args.modes:
        parser.error(f"--modes: expected some of {', '.join(MODES)}, got {args.modes}")
    if min(args.cameras, args.height, args.width, args.repeats) < 1 or args.seconds <= 0:
        parser.error("--cameras, --height, --width, --repeats and --seconds must be positive")
    return args


def camera_names(count: int) -> list[str]:
    return [f"cam{i}" for i in range(count)]


def policy_sets(args: argparse.Namespace, workdir: Path) -> list[str]:
    """The daemon's `--set` options for the policy `args.policy` (making the demo ACT's
    checkpoint in `workdir` for `act`)."""
    if args.policy == "reach":
        cameras = ", ".join(
            f"{{name: {name}, height: {args.height}, width: {args.width}}}"
            for name in camera_names(args.cameras)
        )
        return ["policy.kind=reach", f"robot.cameras=[{cameras}]"]
    if args.policy != "act":
        return ["policy.kind=checkpoint", f"policy.path={args.policy}"]
    checkpoint = workdir / "demo-act"
    sizes = [f"--camera={n}:{args.height}x{args.width}" for n in camera_names(args.cameras)]
    # A process of its own: this one stays free of torch (its busy processes are forked).
    maker = [sys.executable, "-m", "scripts.make_demo_checkpoint", str(checkpoint), *sizes]
    subprocess.run(maker, check=True, capture_output=True)
    sets = ["policy.kind=checkpoint", f"policy.path={checkpoint}"]
    return sets + cpu_fit_sets(args.overrides)


def cpu_fit_sets(overrides: Sequence[str]) -> list[str]:
    """The demo ACT's CPU settings (controller.sim.demo_fit) without CUDA, except the rate
    (this benchmark's own) and whatever `overrides` set."""
    probe = [
        sys.executable,
        "-c",
        "from controller.sim.demo_fit import cuda_available; print(cuda_available())",
    ]
    device = next((s.split("=", 1)[1] for s in overrides if s.startswith("policy.device=")), "")
    if device != "cpu":
        answer = subprocess.run(probe, capture_output=True, text=True, check=True).stdout
        if answer.strip() == "True":
            return []
    from controller.sim.demo_fit import CPU_FITS

    explicit = {s.split("=", 1)[0] for s in overrides} | {"control.rate_hz"}
    return [s for s in CPU_FITS["act"].settings if s.split("=", 1)[0] not in explicit]


class StatusWatch:
    """Reads the daemon's status every POLL_S on a thread and keeps the last answer: the
    recording counts and the lateness p50 that soak() does not return."""

    def __init__(self, soak_root: Path) -> None:
        self._root = soak_root
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: dict[str, Any] = {}

    def start(self) -> None:
        """Called by soak() once its daemon answers (its status socket is in its temporary
        directory, made under `soak_root`)."""
        sockets = sorted(self._root.glob("tempo-soak-*/status.sock"))
        if not sockets:
            raise SystemExit("bench_recording: the soak's status socket was not found")
        endpoint = f"ipc://{sockets[0]}"
        self._thread = threading.Thread(target=self._poll, args=(endpoint,), daemon=True)
        self._thread.start()

    def _poll(self, endpoint: str) -> None:
        while not self._stop.wait(POLL_S):
            status = request_status(endpoint, POLL_S)
            if status is not None:
                self.last = status

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def one_run(
    mode: str,
    args: argparse.Namespace,
    sets: list[str],
    record_dir: Path,
    scratch: Path,
    seconds: float,
) -> dict[str, Any]:
    record_sets = [] if mode == "off" else [
        f"record.mode={mode}", f"record.dir={record_dir}", f"record.frames={args.frames}"
    ]  # fmt: skip
    # After soak's own --camera-hz 30: the last one counts.
    robot_args: tuple[str, ...] = ("--camera-hz", str(args.camera_hz))
    if not args.flat_frames:
        robot_args += ("--textured",)
    if args.frames_on_socket:
        robot_args += ("--frames-on-socket",)
    watch = StatusWatch(scratch)
    saved_tempdir = tempfile.tempdir
    tempfile.tempdir = str(scratch)  # soak() makes its endpoints' directory here
    try:
        result = soak(
            seconds,
            args.rate,
            args.load,
            [*sets, *record_sets, *args.overrides],
            robot_args,
            on_load=watch.start,
        )
    finally:
        tempfile.tempdir = saved_tempdir
        watch.stop()
    status = watch.last
    section = status.get("telemetry", {}).get("sections", {}).get("tick_lateness") or {}
    recording = status.get("recording") or {}
    files = sorted(record_dir.glob("*.mcap")) if record_dir.exists() else []
    mb = sum(f.stat().st_size for f in files) / 1e6
    content_mb = content_bytes(files)
    shutil.rmtree(record_dir, ignore_errors=True)
    # The robot's session as the daemon served it (commands sent / rate): it can outlast
    # `seconds` (a slow policy's robot runs on until its seconds of served actions are done).
    sent = result.get("daemon_sent_last_seen")
    ran_s = sent / args.rate if isinstance(sent, int | float) and sent > 0 else seconds
    return {
        "mode": mode,
        **result,
        "tick_lateness_us_p50": None if section.get("p50_s") is None else section["p50_s"] * 1e6,
        "records_queued": recording.get("queued"),
        "records_written": recording.get("written"),
        "records_dropped": recording.get("dropped"),
        "torn_frames": recording.get("torn_frames"),
        "recording_error": recording.get("error"),
        "files": len(files),
        "mb_written": mb,
        "ran_s": ran_s,
        "mb_per_s": mb / ran_s,
        "content_mb": None if content_mb is None else content_mb / 1e6,
        "content_mb_per_s": None if content_mb is None else content_mb / 1e6 / ran_s,
    }


def content_bytes(files: Sequence[Path]) -> float | None:
    """The recordings' bytes before MCAP's chunk compression (from each file's chunk index;
    None when a file has no summary, as one cut short): what the frames weigh before
    compression, whatever their content."""
    from mcap.reader import make_reader

    total = 0
    for path in files:
        with open(path, "rb") as stream:
            try:
                summary = make_reader(stream).get_summary()
            except Exception:  # a file without a readable summary (cut short)
                return None
        if summary is None:
            return None
        total += sum(chunk.uncompressed_size for chunk in summary.chunk_indexes)
    return float(total)


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tempo-bench-rec-") as tmp:
        workdir = Path(tmp)
        sets = policy_sets(args, workdir)
        base = args.record_dir or workdir / "recordings"
        if args.warmup > 0:
            warmup = workdir / "soak-warmup"
            warmup.mkdir()
            one_run("off", args, sets, base / "warmup", warmup, args.warmup)
        for repeat in range(args.repeats):
            for mode in args.modes:
                record_dir = base / f"run-{len(runs)}-{mode}"
                scratch = workdir / f"soak-{len(runs)}"
                scratch.mkdir()
                run = one_run(mode, args, sets, record_dir, scratch, args.seconds)
                run["repeat"] = repeat
                runs.append(run)
                print(  # progress, on stderr: a run cut short still shows what it measured
                    f"  {mode} (repeat {repeat + 1}/{args.repeats}): p99 "
                    f"{_cell(run, 'tick_lateness_us_p99', '{:.0f}')} us, missed "
                    f"{_cell(run, 'missed_ticks', '{:.0f}')}, dropped "
                    f"{_cell(run, 'records_dropped', '')}",
                    file=sys.stderr,
                    flush=True,
                )
    return runs


COLUMNS = (
    ("mode", "{:>10s}", 10),
    ("tick_lateness_us_p50", "{:.0f}", 8),
    ("tick_lateness_us_p99", "{:.0f}", 8),
    ("tick_lateness_us_max", "{:.0f}", 9),
    ("missed_ticks", "{:.0f}", 7),
    ("gc_pauses", "{:.0f}", 7),
    ("gc_pause_us_max", "{:.0f}", 8),
    ("records_queued", "{:.0f}", 9),
    ("records_written", "{:.0f}", 9),
    ("torn_frames", "{:.0f}", 6),
    ("ran_s", "{:.1f}", 7),
    ("mb_written", "{:.1f}", 9),
    ("mb_per_s", "{:.2f}", 7),
    ("content_mb", "{:.1f}", 10),
    ("content_mb_per_s", "{:.2f}", 10),
    ("records_dropped", "", 0),
)
HEADERS = (
    "mode", "p50 us", "p99 us", "max us", "missed", "gcs", "gc us", "queued", "written", "torn",
    "ran s", "MB", "MB/s", "raw MB", "raw MB/s",
)  # fmt: skip


def _cell(run: dict[str, Any], key: str, fmt: str) -> str:
    value = run.get(key)
    if key == "records_dropped":  # by kind, only those that happened: "observation:12"
        dropped = {k: v for k, v in (value or {}).items() if v}
        shown = " ".join(f"{k}:{v}" for k, v in dropped.items())
        return shown or ("-" if value is None else "0")
    if value is None:
        return "-"
    return value if isinstance(value, str) else fmt.format(value)


def table(args: argparse.Namespace, runs: list[dict[str, Any]]) -> str:
    cameras = (
        f"{args.cameras} camera(s) {args.height}x{args.width}"
        if args.policy in ("act", "reach")
        else "the checkpoint's cameras"
    )
    widths = [w for _, _, w in COLUMNS]
    header = "".join(f"{h:>{w}s}" for h, w in zip(HEADERS, widths, strict=False))
    lines = [
        f"{args.seconds:g} s per run at {args.rate:g} Hz, {cameras} "
        f"at {args.camera_hz:g} Hz ({args.frames} frames), "
        f"policy {args.policy}, {args.load} busy background processes",
        "tick lateness in us (whole run); gcs, gc us: the daemon's garbage collections and the "
        "longest (each stops the loop's thread too); records and drops from the daemon's status; "
        "torn: observations whose frames the driver wrote over before the writer copied them; "
        "MB: on disk (compressed), raw MB: before compression;",
        "ran s: the robot's session (commands sent / rate, as of the last status), what MB/s "
        "divide by",
        header + "  dropped",
    ]
    for run in runs:
        cells = [_cell(run, key, fmt) for key, fmt, _ in COLUMNS]
        row = "".join(f"{c:>{w}s}" for c, w in zip(cells[:-1], widths[:-1], strict=True))
        lines.append(f"{row}  {cells[-1]}")
        if run.get("recording_error"):
            lines.append(f"{'':10s}  the recorder stopped writing: {run['recording_error']}")
    lines.append("spread over repeats (min..max):")
    for mode in args.modes:
        mine = [r for r in runs if r["mode"] == mode]
        parts = []
        for key, label in (("tick_lateness_us_p99", "p99 us"), ("missed_ticks", "missed")):
            values = [r[key] for r in mine if r.get(key) is not None]
            parts.append(
                f"{label} {min(values):.0f}..{max(values):.0f}" if values else f"{label} -"
            )
        lines.append(f"{mode:>10s}  " + ", ".join(parts))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runs = run_all(args)
    if args.json:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        print(json.dumps({"settings": settings, "runs": runs}))
    else:
        print(table(args, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
