"""The daemon side of scripts/fleet/bench_fleet.py: its policies started, a daemon serving them, the
step times the runners report per batch bucket, and the GPU's utilisation sampled meanwhile.

    policies = start_policies(config, tiny=True)      # one per policy_views(config), in order
    with serving(config, policies) as daemon:          # Daemon started, stopped on exit
        ...
    stop_policies(policies, tiny=True)

With `tiny`, every policy is the tiny one (policies.tiny), built in this process; otherwise
each runs in its own inference process, as `tempo serve` runs it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from controller.config import TempoConfig, policy_views
from controller.daemon.service import Daemon
from controller.feed.batch_window import step_times_of


def start_policies(config: TempoConfig, tiny: bool) -> list[Any]:
    """Each of the config's policies, ready to serve (stop them with stop_policies)."""
    started: list[Any] = []
    try:
        for _, view in policy_views(config):
            started.append(_start_one(view, tiny))
    except BaseException:
        stop_policies(started, tiny)
        raise
    return started


def _start_one(view: TempoConfig, tiny: bool) -> Any:
    sizes, window_us = view.execution.batch_sizes, view.execution.batch_window_us
    if tiny:
        from controller.inference.build import build_policy
        from controller.runner_config import RunnerConfig
        from policies.tiny.policy import build_tiny_policy

        runner = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=2)
        return build_policy(view.policy, view.robot, runner, None, build_tiny_policy(),
                            sizes, window_us)  # fmt: skip
    from controller.app import inference_process

    remote = inference_process(view)
    try:
        remote.start()
    except BaseException:
        remote.stop()
        raise
    return remote


def stop_policies(policies: Sequence[Any], tiny: bool) -> None:
    if tiny:
        return  # in this process: nothing runs until a daemon feeds it
    for policy in policies:
        policy.stop()


@contextlib.contextmanager
def serving(config: TempoConfig, policies: Sequence[Any]) -> Iterator[Daemon]:
    daemon = Daemon(config, list(policies))
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def bucket_step_ms(policy_status: dict[str, Any]) -> dict[int, float]:
    """Batch size -> the serving tier's measured step time (ms), as the runner reports it."""
    return {size: s * 1e3 for size, s in sorted(step_times_of(policy_status).items())}


class GpuSampler:
    """The GPU's utilisation (%), sampled by `nvidia-smi` every `interval_ms` while in the
    `with` block; `summary()` gives the mean and max, or "n/a" without nvidia-smi."""

    def __init__(self, interval_ms: int = 200) -> None:
        self.interval_ms = interval_ms
        self.samples: list[float] = []
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        command = shutil.which("nvidia-smi")
        if command is None:
            return self
        self._process = subprocess.Popen(
            [command, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
             "-lms", str(self.interval_ms)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        stdout = self._process.stdout if self._process is not None else None
        for line in stdout or ():
            with contextlib.suppress(ValueError):
                self.samples.append(float(line.strip()))

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=5)
        if self._reader is not None:
            self._reader.join(timeout=5)

    def summary(self) -> dict[str, Any] | str:
        if self._process is None or not self.samples:
            return "n/a"
        return {
            "mean_pct": sum(self.samples) / len(self.samples),
            "max_pct": max(self.samples),
            "samples": len(self.samples),
        }
