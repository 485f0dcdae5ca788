"""Inference processes started on private channels, and ended.

    spawner = Spawner(command, env)   # per RemotePolicy: a private directory and ZeroMQ context
    child = spawner.spawn()           # (socket, process): the process says `standby` once imported
    end_child(child, timeout_s)       # asked to stop, killed if it has not within timeout_s
    spawner.close()

Each child gets its own ipc channel (a PAIR socket bound here), so a restarted process never
reads what was meant for the one before. The child is told the control process's pid, so that
it can tell it was orphaned before it could ask to die with us (`parent_death`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence

import zmq

from controller.inference.parent_death import CONTROL_PID
from controller.inference.process_messages import MAX_MESSAGE_BYTES, pack

Child = tuple[zmq.Socket, "subprocess.Popen[bytes]"]


class Spawner:
    def __init__(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.command = list(command)
        self.env = dict(env) if env is not None else {}
        self.directory = tempfile.mkdtemp(prefix="tempo-inference-")
        self.context = zmq.Context()
        self._count = 0  # children started: one channel each

    @property
    def closed(self) -> bool:
        return self.context.closed

    def spawn(self) -> Child:
        """A new process on a channel of its own; it says `standby` once imported."""
        self._count += 1
        endpoint = f"ipc://{self.directory}/channel-{self._count}"
        socket = self.context.socket(zmq.PAIR)
        try:
            socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
            socket.setsockopt(zmq.LINGER, 0)
            socket.bind(endpoint)
            env = {**os.environ, **self.env, CONTROL_PID: str(os.getpid())}
            process = subprocess.Popen([*self.command, "--channel", endpoint], env=env)
        except BaseException:
            socket.close(linger=0)
            raise
        return socket, process

    def close(self) -> None:
        """Close every channel and remove the directory (the children are ended first)."""
        self.context.destroy(linger=0)
        shutil.rmtree(self.directory, ignore_errors=True)


def end_child(child: Child | None, timeout_s: float) -> None:
    """Ask the child to stop, close its channel, and kill it if it has not exited in time."""
    if child is None:
        return
    socket, process = child
    try:
        socket.send(pack("stop"), zmq.NOBLOCK)
    except zmq.ZMQError:
        pass
    socket.close(linger=0)
    wait_or_kill(process, timeout_s)


def wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
