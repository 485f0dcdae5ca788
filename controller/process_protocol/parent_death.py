"""An inference process never outlives the control process that started it.

The control process names itself in TEMPO_CONTROL_PID when it spawns one. The child asks the
kernel to kill it when its parent dies (Linux prctl PR_SET_PDEATHSIG), as the very first thing
it does, and then checks that its parent is still that process: a parent that died during the
child's start (a standby spends seconds importing torch) would otherwise leave it adopted by
init, waiting forever. Only the standard library: it runs before anything heavy is imported.
"""

from __future__ import annotations

import ctypes
import os
import signal

CONTROL_PID = "TEMPO_CONTROL_PID"
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies, even in the middle of a
    compile (the serving loop's parent check covers other systems)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def control_pid() -> int:
    """The control process this one serves: the pid it named, else the current parent."""
    named = os.environ.get(CONTROL_PID, "")
    return int(named) if named.isdigit() else os.getppid()


def parent_alive(parent: int) -> bool:
    """Whether `parent` is still this process's parent (else it died and init adopted us)."""
    return os.getppid() == parent
