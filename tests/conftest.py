"""Shared test helpers: configs on private ipc endpoints, in-process and subprocess daemons."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from controller.config import TempoConfig, load_config


def ipc_config(tmp_path: Path, *overrides: str) -> TempoConfig:
    """A config whose endpoints are private ipc:// paths (no fixed ports in tests)."""
    return load_config(
        None,
        [
            f"server.bind=ipc://{tmp_path}/tempo.sock",
            f"server.status_bind=ipc://{tmp_path}/status.sock",
            *overrides,
        ],
    )


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.005) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout} s: {getattr(predicate, '__name__', predicate)}")


@contextmanager
def running_daemon(config: TempoConfig, policy: Any = None) -> Iterator[Any]:
    """A daemon in this process (threads), stopped on exit."""
    from controller.app import build_policy
    from controller.daemon import Daemon

    daemon = Daemon(config, policy or build_policy(config))
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@contextmanager
def daemon_process(tmp_path: Path, *overrides: str) -> Iterator[subprocess.Popen[str]]:
    """`tempo serve` as a child process, ready (status answers) before yielding."""
    from controller.status_server import request_status

    args = [
        sys.executable, "-m", "controller.cli", "serve", "--log-level", "INFO",
        "--set", f"server.bind=ipc://{tmp_path}/tempo.sock",
        "--set", f"server.status_bind=ipc://{tmp_path}/status.sock",
    ]
    for override in overrides:
        args += ["--set", override]
    log = open(tmp_path / f"daemon-{time.monotonic_ns()}.log", "w")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: process.poll() is not None
                 or request_status(f"ipc://{tmp_path}/status.sock", 0.2), timeout=60)
        if process.poll() is not None:
            pytest.fail(f"daemon exited at start: {Path(log.name).read_text()}")
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()
