"""The inference process's main (`tempo inference-process`, spawned by the control process's
RemotePolicy): build the policy, then serve the control process on the channel it passed.

Importing this module imports what every build needs (torch, Tempo's runner and the policies),
so that a process standing by has done its imports before a restart asks it to build. Torch's
compiler (dynamo and inductor, 3.5 s of an H200 host's 8 s of imports) is imported by a spare
while it stands by, and otherwise by the first torch.compile: a start from built artefacts never
needs it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import policies.checkpoints.load  # noqa: F401 - the build loads a checkpoint
from controller.bounded_file import MAX_CONFIG_BYTES, read_stream_text, read_text
from controller.config_sections import SupervisionConfig
from controller.errors import ConfigError
from controller.inference import build
from controller.inference.local_policy import LocalPolicy
from controller.inference.process_server import serve_control_process
from controller.inference.threads import apply_inference_threads
from controller.policy_sections import PolicyConfig, RobotConfig
from controller.process_protocol.parent_death import control_pid
from controller.runner_config import RunnerConfig

log = logging.getLogger(__name__)


def config_json(path: Path | None) -> str:
    """The config (JSON) this process builds from: the control process writes it to our stdin
    (it holds it in memory, so a restart months later needs no file), or a file named by hand."""
    if path is not None:
        return read_text(path, MAX_CONFIG_BYTES, ConfigError, "config file")
    return read_stream_text(sys.stdin.buffer, MAX_CONFIG_BYTES, ConfigError, "the config on stdin")


def run_inference_process(
    policy: PolicyConfig,
    robot: RobotConfig,
    runner: RunnerConfig,
    supervision: SupervisionConfig,
    channel_fd: int,
    batch_sizes: Sequence[int] = (1,),
) -> int:
    """Build the policy (`build.build_policy` of the `policy:`, `robot:` and `runner:`
    sections), serve the control process on the channel it passed as file descriptor
    `channel_fd`, polling as `supervision:` says, several robots a step in `batch_sizes`
    (execution.batch_sizes); returns the exit code."""
    busy_poll_s = supervision.busy_poll_ms / 1000
    apply_inference_threads(supervision.inference_threads)

    def build_then_serve_at_full_priority() -> LocalPolicy:
        # build.build_policy looked up when the build starts: tests swap it for a policy of theirs.
        # Batch sizes only when set: a test's stand-in for build_policy may not take them.
        if tuple(batch_sizes) == (1,):
            built = build.build_policy(policy, robot, runner)
        else:
            built = build.build_policy(policy, robot, runner, batch_sizes=batch_sizes)
        match_control_priority()
        return built

    def prepare_while_standing_by() -> bool:
        """A spare's wait: the policy read onto the host (build.read_policy_ahead: a restart's
        build then reads nothing), and torch's compiler imported (torch would import it at the
        first torch.compile otherwise, in the restart's time). Whether the policy was read."""
        read = build.read_policy_ahead(policy, robot, runner)
        import_the_compiler()
        return read

    return serve_control_process(
        build_then_serve_at_full_priority,
        channel_fd,
        busy_poll_s,
        prepare_while_standing_by,
        checkpoint=None if policy.path is None else str(policy.path),
    )


def import_the_compiler() -> None:
    """What a build that compiles needs imported (dynamo and inductor)."""
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401


def match_control_priority() -> None:
    """Every thread of this process back to the control process's CPU priority, once built:
    the control process started it lower (process_spawner), so that its imports, build and
    warm-up could not take the CPU from the control loop. Raising a priority needs
    CAP_SYS_NICE (or RLIMIT_NICE); without it the process serves at the lower one, said once."""
    try:
        target = os.getpriority(os.PRIO_PROCESS, control_pid())
        if os.getpriority(os.PRIO_PROCESS, 0) <= target:
            return
        for thread in os.listdir("/proc/self/task"):  # a priority is a thread's own on Linux
            os.setpriority(os.PRIO_PROCESS, int(thread), target)
    except OSError as exc:  # EPERM without the privilege
        log.info("the inference process serves at a lower CPU priority than the control "
                 "process (%s): give it CAP_SYS_NICE to raise it back", exc)  # fmt: skip
