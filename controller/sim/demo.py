"""`tempo demo`: the daemon and a simulated robot as separate processes, with a live status line.

Both processes get the same configuration; they talk over private ipc:// endpoints in a temporary
directory, so the demo never collides with a daemon already running on the default port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from controller.observe.status import json_safe
from controller.observe.status_server import request_status

READY_TIMEOUT_S = 600.0  # a first compile of a large model can take minutes


def demo_checkpoint_dir() -> Path:
    """Where the demo's ACT checkpoint lives (made on first run); the other families' demo
    checkpoints sit next to it (demo-flow, demo-tdmpc2)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tempo" / "demo-act"


def demo_policy_args(
    policy: str,
    config_path: Path | None = None,
    overrides: Sequence[str] = (),
    quiet: bool = False,
) -> list[str]:
    """`--set` options that make the daemon serve the demo policy of the family called
    `policy` (policies.registry); creates its checkpoint the first time. Each is shaped for the
    simulated robot (6 joints, one 96x128 camera), with random weights and a fixed seed: the
    model path is real, the behaviour is not trained. Without a CUDA GPU, settings a CPU keeps
    up with are added (controller.sim.demo_fit) unless the user's config or `overrides` set
    them, and a line says which and why (on stderr when `quiet`)."""
    from controller.errors import ConfigError
    from controller.sim.demo_fit import cpu_fit, cuda_available, explicit_keys
    from policies.registry import families, get_family

    demo = get_family(policy).demo
    if demo is None:
        known = ", ".join(f.name for f in families() if f.demo is not None)
        raise ConfigError(f"policy family {policy!r} has no demo; demos: {known}")
    settings = demo.settings(demo_checkpoint_dir().parent)
    explicit = explicit_keys(config_path, overrides)
    device = next((s.split("=", 1)[1] for s in overrides if s.startswith("policy.device=")), None)
    fitted, line = cpu_fit(policy, cuda_available(device), explicit)
    if line:
        print(f"tempo demo: {line}", file=sys.stderr if quiet else sys.stdout, flush=True)
    return [arg for setting in [*settings, *fitted] for arg in ("--set", setting)]


def _tempo_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "controller.cli", *args]


_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
# Loggers whose INFO lines are the daemon's start-up progress (loading, compiling, checks).
_PROGRESS_LOGGERS = (
    "controller.inference",
    "controller.link",
    "controller.app",
    "controller.daemon.service",
)


class _DaemonLog:
    """The daemon's log, read on a thread: kept for a failed start, and shown on stderr from
    the user's --log-level up; until the daemon is ready, its start-up progress is shown too,
    so a long compile is not silence."""

    def __init__(self, stream: IO[str], level: str, quiet: bool) -> None:
        self.lines: list[str] = []
        self.starting = True
        self._level = _LEVELS.get(level, 30)
        self._quiet = quiet
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)
            if self._shown(line):
                sys.stderr.write(line)
                sys.stderr.flush()

    def _shown(self, line: str) -> bool:
        # setup_logging's format: "<date> <time> LEVEL logger: message"
        parts = line.split(" ", 4)
        level = _LEVELS.get(parts[2], 0) if len(parts) > 3 else 50  # not a log line: show it
        if level >= self._level:
            return True
        progress = len(parts) > 3 and parts[3].startswith(_PROGRESS_LOGGERS)
        return self.starting and not self._quiet and level >= 20 and progress

    def text(self) -> str:
        return "".join(self.lines)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class _LineReader:
    """Keeps the newest JSON line a child process prints (read on a thread: pipes block)."""

    def __init__(self, stream: IO[str]) -> None:
        self.latest: dict[str, Any] = {}
        self.final: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("final"):
                self.final = record
            self.latest = record

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def _has_first_action(driver: dict[str, Any]) -> bool:
    """The robot has a latency to report: an action computed from its observation came."""
    latency = driver.get("latency_ms_p50")
    return isinstance(latency, (int, float)) and latency == latency  # not NaN


def _status_line(status: dict[str, Any], driver: dict[str, Any]) -> str:
    """Holds are counted twice, each with its clock: the robot's loop (200 Hz) counts its turns
    without an action to apply, the daemon its control ticks that sent a hold."""
    tier = status.get("policy", {}).get("tier", "eager")
    if not _has_first_action(driver):
        # Before the robot's first action there is no latency to show (not a NaN to read)
        return f"waiting for the simulated robot's first action | tier {tier}"
    return (
        f"rate {status['achieved_hz']:6.1f}/{status['control_hz']:.0f} Hz | "
        f"obs->action p50 {driver.get('latency_ms_p50', float('nan')):5.1f} "
        f"p99 {driver.get('latency_ms_p99', float('nan')):5.1f} ms | "
        f"missed {status['missed_ticks']} | robots {len(status['robots'])} | tier {tier} | "
        f"held: robot loop turns {driver.get('holds', 0)} "
        f"({driver.get('loop_hz', 200.0):g} Hz), daemon ticks {status.get('holds_sent', 0)} "
        f"({status['control_hz']:g} Hz) | guards {_interventions(status)}"
    )


def step_versus_period(status: dict[str, Any]) -> str | None:
    """A sentence when the serving tier's measured step is longer than the control period:
    each chunk then lands a step or more after its observation, and its first rows are late."""
    policy = status.get("policy") or {}
    tier = policy.get("tier")
    reports = {t.get("name"): t for t in policy.get("tiers", [])}
    step_s = (reports.get(tier) or {}).get("step_s")
    period_ms = 1000.0 / status["control_hz"]
    if not step_s or step_s * 1000.0 <= period_ms:
        return None
    return (
        f"note: a policy step takes {step_s * 1000.0:.0f} ms on tier {tier}, longer than the "
        f"control period ({period_ms:.0f} ms at {status['control_hz']:g} Hz): each chunk arrives "
        "a step or more after its observation and its first actions are skipped. A GPU (or a "
        "lower control.rate_hz, a longer execution.query_period; for TD-MPC2 "
        "policy.tdmpc2.mode=prior) closes the gap."
    )


def _interventions(status: dict[str, Any]) -> int:
    """Guard interventions so far (held ticks are not interventions: nothing was changed)."""
    counts = status.get("guard_interventions", {})
    return sum(v for k, v in counts.items() if k != "held_ticks")


def run_demo(seconds: float, config_args: Sequence[str], as_json: bool, log_level: str) -> int:
    with tempfile.TemporaryDirectory(prefix="tempo-demo-") as tmp:
        bind = f"ipc://{Path(tmp) / 'tempo.sock'}"
        status_bind = f"ipc://{Path(tmp) / 'status.sock'}"
        endpoints = ["--set", f"server.bind={bind}", "--set", f"server.status_bind={status_bind}"]
        # The daemon logs at INFO at least, so its start-up progress can be shown; what is
        # shown after that is what the user's --log-level asks for.
        daemon_level = "DEBUG" if log_level == "DEBUG" else "INFO"
        daemon = subprocess.Popen(
            _tempo_command("serve", *config_args, *endpoints, "--log-level", daemon_level),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        log = _DaemonLog(daemon.stdout, log_level, quiet=as_json)  # type: ignore[arg-type]
        try:
            return _drive(daemon, seconds, config_args, endpoints, status_bind, as_json, log)
        finally:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(5)
                except subprocess.TimeoutExpired:
                    daemon.kill()
            log.join(2.0)


def _drive(
    daemon: subprocess.Popen[str],
    seconds: float,
    config_args: Sequence[str],
    endpoints: Sequence[str],
    status_bind: str,
    as_json: bool,
    log: _DaemonLog,
) -> int:
    # Progress always shows: with --json on stderr, so stdout holds the JSON object alone.
    out = sys.stderr if as_json else sys.stdout
    say = lambda text: print(text, file=out, flush=True)  # noqa: E731
    say("tempo demo: starting the daemon (loading and warming up the policy) ...")
    started = time.monotonic()
    while request_status(status_bind, timeout_s=0.5) is None:
        if daemon.poll() is not None or time.monotonic() - started > READY_TIMEOUT_S:
            log.join(2.0)
            print("tempo demo: the daemon did not start; its log:\n" + log.text(), file=sys.stderr)
            return 1
    log.starting = False
    say(
        f"tempo demo: daemon ready in {time.monotonic() - started:.1f} s; "
        "starting the simulated robot"
    )
    baseline = request_status(status_bind) or {}
    note = step_versus_period(baseline) if baseline else None
    if note:
        say(f"tempo demo: {note}")
    robot = subprocess.Popen(
        _tempo_command(
            "sim-robot", *config_args, *endpoints, "--seconds", str(seconds), "--json-lines"
        ),
        stdout=subprocess.PIPE,
        text=True,
    )
    reader = _LineReader(robot.stdout)  # type: ignore[arg-type]  # set by stdout=PIPE
    interactive = sys.stdout.isatty() and not as_json
    status: dict[str, Any] = baseline
    # The summary counts from the robot's first action, as --seconds does (not from the
    # daemon's ready: the robot's connect and a slow first step are no control ticks of its).
    first_action: dict[str, Any] | None = None
    while robot.poll() is None:
        time.sleep(0.5)
        status = request_status(status_bind, timeout_s=1.0) or status
        if first_action is None and _has_first_action(reader.latest):
            first_action = status
        if status and not as_json:
            line = _status_line(status, reader.latest)
            print("\r" + line if interactive else line, end="" if interactive else "\n", flush=True)
    reader.join(2.0)
    if interactive:
        print()
    final_status = request_status(status_bind, timeout_s=1.0) or status
    driver = reader.final or reader.latest
    if robot.returncode != 0 or not driver:
        print(f"tempo demo: the simulated robot failed (exit {robot.returncode})", file=sys.stderr)
        return 1
    summary = _summary(first_action or baseline, final_status, driver)
    if as_json:
        print(json.dumps(json_safe(summary)))
    else:
        say("tempo demo: summary")
        for key, value in summary.items():
            say(f"  {key:24s} {value:.3f}" if isinstance(value, float) else f"  {key:24s} {value}")
    return 0


def _summary(
    before: dict[str, Any], after: dict[str, Any], driver: dict[str, Any]
) -> dict[str, Any]:
    ticks = after["ticks"] - before.get("ticks", 0)
    elapsed = after["uptime_s"] - before.get("uptime_s", 0.0)
    return {
        "control_hz": after["control_hz"],
        "ticks": ticks,
        "achieved_hz": ticks / elapsed if elapsed > 0 else 0.0,
        "missed_ticks": after["missed_ticks"] - before.get("missed_ticks", 0),
        "latency_ms_p50": driver["latency_ms_p50"],
        "latency_ms_p99": driver["latency_ms_p99"],
        "tick_lateness_us_p99": after["tick_lateness_us_p99"],
        # Two clocks (README, "What the demo shows"): the robot's loop turns at robot_loop_hz
        # and applies an action or holds each turn; the daemon sends one command per tick.
        "robot_loop_hz": driver.get("loop_hz", 200.0),
        "robot_loop_actions": driver["actions_applied"],
        "robot_loop_holds": driver["holds"],
        "robot_travel_rad": driver["travel_rad"],  # > 0: the policy's actions moved the arm
        "driver_action_hz": driver["action_hz"],
        "daemon_tick_holds": after["holds_sent"] - before.get("holds_sent", 0),
        "expired_actions": driver["expired"],
        "observations": driver["observations"],
        "inference_ms_p50": after["inference_ms_p50"],
        "policy_tier": after.get("policy", {}).get("tier", "eager_fp32"),
        "guard_interventions": after.get("guard_interventions", {}),
    }
