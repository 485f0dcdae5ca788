"""Inference processes started on private channels, and ended.

    spawner = Spawner(command, env)   # per RemotePolicy
    child = spawner.spawn()           # (channel, process): the process says `standby` once imported
    end_child(child, timeout_s)       # asked to stop, killed if it has not within timeout_s

Each child gets its own channel (a socket pair, `process_channel`; the child inherits its end
as `--channel-fd`), so a restarted process never reads what was meant for the one before. The
child is told the control process's pid, so that it can tell it was orphaned before it could
ask to die with us (`parent_death`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from controller.inference.parent_death import CONTROL_PID
from controller.inference.process_channel import ChannelError, ProcessChannel
from controller.inference.process_messages import pack

Child = tuple[ProcessChannel, "subprocess.Popen[bytes]"]


class Spawner:
    def __init__(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.command = list(command)
        self.env = dict(env) if env is not None else {}

    def spawn(self) -> Child:
        """A new process on a channel of its own; it says `standby` once imported."""
        channel, theirs = ProcessChannel.pair()
        try:
            env = {**os.environ, **self.env, CONTROL_PID: str(os.getpid())}
            fd = theirs.fileno()
            process = subprocess.Popen(
                [*self.command, "--channel-fd", str(fd)], env=env, pass_fds=(fd,)
            )
        except BaseException:
            channel.close()
            raise
        finally:
            theirs.close()  # the child's end lives in the child only
        return channel, process


def end_child(child: Child | None, timeout_s: float) -> None:
    """Ask the child to stop, close its channel, and kill it if it has not exited in time."""
    if child is None:
        return
    channel, process = child
    try:
        channel.send(pack("stop"))
    except ChannelError:
        pass
    channel.close()
    wait_or_kill(process, timeout_s)


def wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
