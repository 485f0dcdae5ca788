"""What supervision has restarted and why, for `tempo status` and the log.

    ledger = RestartLedger()
    ledger.failed("exited", "the inference process exited with code -9")   # a process failed
    ledger.restart_failed("the inference process exited with code 1 while starting", 2.0)
    ledger.restarted()                                                      # serving again
    ledger.took_over(pid)                              # the hot standby serves: no rebuild
    ledger.status()      # restart_count, restarts (the newest RESTARTS_KEPT), restart_failure

A restart that keeps failing the same way is counted in a row (`restart_failure`: the reason,
how many times, when the next try is), so that status says why robots stay held instead of
burying the reason under a list of retries.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

RESTARTS_KEPT = 50  # restarts listed in status (all are counted)


@dataclass(frozen=True)
class Restart:
    time: float  # wall clock, for people reading status
    cause: str
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class RestartLedger:
    def __init__(self) -> None:
        self.restarts: collections.deque[Restart] = collections.deque(maxlen=RESTARTS_KEPT)
        self.count = 0  # process failures, each starting a restart
        # The restarts failing now: {"detail", "count" (in a row, the same way), "next_try"}.
        self.failure: dict[str, Any] | None = None

    def failed(self, cause: str, detail: str) -> None:
        """The serving process failed (`cause`: exited, hung, fatal); a restart follows."""
        log.error("inference process %s: %s; holding every robot and restarting", cause, detail)
        self.restarts.append(Restart(time.time(), cause, detail))
        self.count += 1  # logged first, as for restart_failed

    def restart_failed(self, detail: str, next_s: float) -> None:
        """A restart failed; the next try is in `next_s`. The same failure again counts up."""
        now = time.time()
        failing = self.failure
        count = failing["count"] + 1 if failing is not None and failing["detail"] == detail else 1
        # Logged before status shows it: status (read from other threads) never reports a
        # failure the log does not have yet.
        log.error(
            "restarting the inference process failed (%d time%s in a row): %s; next try in %.1f s",
            count,
            "" if count == 1 else "s",
            detail,
            next_s,
        )
        self.restarts.append(Restart(now, "restart_failed", detail))
        self.failure = {"detail": detail, "count": count, "next_try": now + next_s}

    def took_over(self, pid: int) -> None:
        """The hot standby (process `pid`) serves in place of the failed process: no build."""
        self.failure = None
        detail = f"the hot standby (pid {pid}) took over; nothing was rebuilt"
        self.restarts.append(Restart(time.time(), "standby_took_over", detail))
        log.warning("inference process: %s; a new standby is being built", detail)

    def swap_took_over(self, pid: int) -> None:
        """A swap's new process (`pid`), serving robots at their episode start, serves every
        robot in place of the failed process (episode_swap)."""
        self.failure = None
        detail = f"the swap's new process (pid {pid}) took over every robot; nothing was rebuilt"
        self.restarts.append(Restart(time.time(), "swap_took_over", detail))
        log.warning("inference process: %s", detail)

    def restarted(self) -> None:
        self.failure = None

    def status(self) -> dict[str, Any]:
        return {
            "restart_count": self.count,
            "restarts": [r.as_dict() for r in self.restarts],  # the newest RESTARTS_KEPT
            "restart_failure": self.failure,
        }
