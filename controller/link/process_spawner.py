"""Inference processes started on private channels, and ended.

    spawner = Spawner(command, env, stdin=config_json)   # per RemotePolicy
    child = spawner.spawn()           # (channel, process): the process says `standby` once imported
    hello = expect(channel, process, Hello, timeout_s, stop)   # the start-up conversation
    send_at_start(channel, Build())
    end_child(child, timeout_s)       # asked to stop, killed if it has not within timeout_s

Each child gets its own channel (a socket pair, `process_channel`; the child inherits its end
as `--channel-fd`), so a restarted process never reads what was meant for the one before. The
child is told the control process's pid, so that it can tell it was orphaned before it could
ask to die with us (`parent_death`).

Children start `nice` steps below the control process's CPU priority: on a machine with few
cores, a starting child (importing torch, building and warming up the policy on every core)
would otherwise take the CPU from the control loop, which must keep its rate through a restart.
Once built, a child returns to the control process's priority
(`process_main.match_control_priority`); children start lower only where they may return
(root, CAP_SYS_NICE or RLIMIT_NICE), never to serve for good below the daemon.

What a child reads at start (the daemon's config) is held here, in memory, and handed to each
child as its stdin (an anonymous memfd, never a name on disk): a tmp cleaner that empties /tmp
under a daemon running for weeks cannot make its restarts fail.
"""

from __future__ import annotations

import copy
import logging
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TypeVar

from controller.errors import PolicyError
from controller.process_protocol.parent_death import CONTROL_PID
from controller.process_protocol.process_channel import ChannelError, ProcessChannel
from controller.process_protocol.process_messages import (
    FailedStart,
    Message,
    MessageError,
    Stop,
    decode,
    encode,
)

log = logging.getLogger(__name__)

Child = tuple[ProcessChannel, "subprocess.Popen[bytes]"]
M = TypeVar("M", bound=Message)


class Spawner:
    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        nice: int = 0,
    ) -> None:
        self.command = list(command)
        self.env = dict(env) if env is not None else {}
        self.stdin = stdin  # every child's stdin (the config it builds from), or inherited
        # How much lower the children's CPU priority is than ours: only where they may raise it
        # back once built, so that no inference process serves for good below the daemon.
        self.nice = nice if nice and priority_can_be_restored() else 0
        if nice and not self.nice:
            log.info(
                "inference processes start at the control process's CPU priority: this user "
                "cannot raise a priority again (root, CAP_SYS_NICE or RLIMIT_NICE), so a "
                "starting one shares the CPU with the control loop"
            )

    def with_stdin(self, stdin: bytes) -> Spawner:
        """The same spawner with another stdin for its children (a swapped policy's config)."""
        other = copy.copy(self)
        other.stdin = stdin
        return other

    def spawn(self) -> Child:
        """A new process on a channel of its own; it says `standby` once imported."""
        channel, theirs = ProcessChannel.pair()
        stdin = None
        try:
            stdin = _memory_file(self.stdin) if self.stdin is not None else None
            env = {**os.environ, **self.env, CONTROL_PID: str(os.getpid())}
            fd = theirs.fileno()
            process = subprocess.Popen(
                [*self.command, "--channel-fd", str(fd)], env=env, pass_fds=(fd,), stdin=stdin
            )
        except BaseException:
            channel.close()
            raise
        finally:
            theirs.close()  # the child's end lives in the child only
            if stdin is not None:
                os.close(stdin)
        if self.nice:
            _lower_priority(process.pid, self.nice)
        return channel, process


def priority_can_be_restored() -> bool:
    """Whether a process of ours may raise its CPU priority back to ours after lowering it:
    root, CAP_SYS_NICE (capability 23) in effect, or an RLIMIT_NICE reaching our nice value."""
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:") and int(line.split()[1], 16) >> 23 & 1:
                    return True
    except (OSError, ValueError):
        pass
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)  # the nice floor is 20 - soft
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    return soft == resource.RLIM_INFINITY or 20 - soft <= ours


def _lower_priority(pid: int, nice: int) -> None:
    """Make the child `nice` steps nicer than this process. Set before it starts a thread (it
    has just exec'd Python; torch's threads come seconds later and inherit it); nobody needs a
    privilege to lower a priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
    except OSError as exc:  # it has exited already: its start says so
        log.debug("could not lower the priority of process %s (%s)", pid, exc)


def _memory_file(data: bytes) -> int:
    """A file descriptor of an anonymous in-memory file holding `data`, read from its start:
    a child reads it whole without the writer waiting on a pipe, and no name on disk is
    involved."""
    fd = os.memfd_create("tempo-stdin", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def end_child(child: Child | None, timeout_s: float) -> None:
    """Ask the child to stop, close its channel, and kill it if it has not exited in time."""
    if child is None:
        return
    channel, process = child
    close_channel(channel, ask_to_stop=True)
    wait_or_kill(process, timeout_s)


def close_channel(channel: ProcessChannel, ask_to_stop: bool) -> None:
    """Close a child's channel, first asking it to stop (without waiting) when `ask_to_stop`."""
    if ask_to_stop:
        try:
            channel.send(encode(Stop()))
        except ChannelError:
            pass  # gone or not reading: its exit (or the kill) follows all the same
    channel.close()


def wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def expect(
    link: ProcessChannel,
    process: subprocess.Popen[bytes],
    expected: type[M],
    timeout_s: float,
    stop: threading.Event,
) -> M:
    """The starting child's next message of type `expected`; PolicyError with the reason when it
    says FailedStart, exits, stays silent for `timeout_s`, or `stop` is set meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stop.is_set():
            raise PolicyError("stopped while the inference process was starting")
        data = link.receive(timeout_ms=100)
        if data is not None:
            message = decode(data)
            if isinstance(message, expected):
                return message
            if isinstance(message, FailedStart):
                raise PolicyError(message.error)
            continue
        try:  # its channel ends when it exits: wait for the exit code then
            code = process.wait(timeout=0.1) if link.closed else process.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            raise PolicyError(
                f"the inference process exited with code {code} while starting (its log says why)"
            )
    raise PolicyError(
        f"the inference process sent no {expected.KIND!r} within {timeout_s:.0f} s of starting"
    )


def send_at_start(link: ProcessChannel, message: Message, fds: Sequence[int] = ()) -> None:
    """A start-up message: the child is waiting for it, so a short wait is enough."""
    try:
        link.send(encode(message), timeout_s=5.0, fds=fds)
    except ChannelError as exc:
        raise PolicyError(
            f"the inference process stopped taking messages while starting ({exc})"
        ) from None


def has_news(link: ProcessChannel) -> bool:
    """Whether a standing-by child has said something (or ended). Never raises: the supervisor
    thread asks; a corrupt channel is found and told by the start that takes the child."""
    try:
        return link.poll(0)
    except MessageError:
        return True
