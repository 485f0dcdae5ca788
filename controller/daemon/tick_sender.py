"""The tick's messages out through the transport: one `action` or `hold` per robot per tick
(and the holds of a failed tick or a stopping daemon), each with the robot's next seq.

Sent as the robot's packed headers (tick_messages) through the transport's allocation-free
`send_prepared` when there is one, else encoded the ordinary way through `send`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from controller.daemon.refusals import Sender
from controller.daemon.session import Session

# (identity, packed header frame, array or None) -> sent? (RouterTransport.send_prepared)
PreparedSender = Callable[[bytes, Any, Any], bool]


class TickSender:
    def __init__(self, send: Sender, send_prepared: PreparedSender | None = None) -> None:
        """`send_prepared`: the tick's allocation-free send of packed headers; without it the
        tick's messages go through `send` like every other (slower, allocating)."""
        self.send = send
        self.send_prepared = send_prepared
        self.actions_sent = 0  # delivered to the transport
        self.holds_sent = 0
        # The session counter of each hold reason, built once (not a concatenation per tick).
        self._hold_counters: dict[str, str] = {}

    def action(self, session: Session, step: int, valid_until_ns: int) -> bool:
        """This tick's command (`session.pipeline.command`), valid until `valid_until_ns` of
        our clock; True when the transport took it."""
        seq = session.next_send_seq()
        # In the driver's clock: our deadline shifted by the offset seen on its last
        # observation (which includes transport delay, so the deadline errs early).
        deadline_ns = valid_until_ns + session.clock_offset_ns
        obs_seq = session.newest_chunk_obs_seq
        command = session.pipeline.command
        headers, send_prepared = session.tick_headers, self.send_prepared
        header = None
        if send_prepared is not None and headers is not None:
            header = headers.action(seq, time.monotonic_ns(), step, obs_seq, deadline_ns)
        if send_prepared is not None and header is not None:
            sent = send_prepared(session.identity, header, command)
        else:  # no packed headers, or a value past int64
            fields = {"session": session.id, "step": step, "obs_seq": obs_seq}
            fields["deadline_ns"] = deadline_ns
            sent = self.send(
                session.identity, "action", seq=seq, fields=fields, arrays={"action": command}
            )
        if sent:
            self.actions_sent += 1
        return sent

    def hold(self, session: Session, step: int, reason: str) -> bool:
        """`hold` with `reason`, counted in the session's `hold_<reason>`."""
        seq = session.next_send_seq()
        counter = self._hold_counters.get(reason)
        if counter is None:
            counter = self._hold_counters[reason] = "hold_" + reason
        session.count(counter)
        self.holds_sent += 1
        headers = session.tick_headers
        if self.send_prepared is not None and headers is not None:
            header = headers.hold(seq, time.monotonic_ns(), step, reason)
            if header is not None:
                return self.send_prepared(session.identity, header, None)
        fields = {"session": session.id, "step": step, "reason": reason}
        return self.send(session.identity, "hold", seq=seq, fields=fields)
