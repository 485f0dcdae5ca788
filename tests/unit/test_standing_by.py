"""The inference process's wait for `build`: a start (the control process answers `standby` with
`build` at once) builds straight away; a spare (nothing comes for a while) first runs its
standing-by work (process_main: importing torch's compiler), then builds when told."""

from __future__ import annotations

import os

from controller.errors import PolicyError
from controller.inference import process_server
from controller.process_protocol.process_messages import Build, FailedStart, Standby, decode, encode


class _Link:
    """A channel whose incoming messages are scripted (None: nothing within the wait)."""

    closed = False

    def __init__(self, incoming: list[bytes | None]) -> None:
        self.incoming = incoming
        self.sent: list[object] = []
        self.order: list[str] = []

    def send(self, data: bytes, timeout_s: float) -> None:
        self.sent.append(decode(data))

    def receive(self, timeout_ms: int) -> bytes | None:
        self.order.append(f"receive {timeout_ms}")
        return self.incoming.pop(0) if self.incoming else None


def _stand_by(incoming: list[bytes | None]) -> tuple[_Link, list[str]]:
    link = _Link(incoming)

    def build() -> None:
        link.order.append("build")
        raise PolicyError("the test's build stops here")

    def standing_by() -> bool:
        link.order.append("standing by")
        return False  # nothing read ahead (the `prepared` message says so)

    code = process_server._stand_by_and_serve(
        build,  # type: ignore[arg-type]
        link,  # type: ignore[arg-type]
        os.getppid(),  # the control process, alive
        0.0,
        standing_by,
    )
    assert code == 2 and isinstance(link.sent[0], Standby)
    assert link.sent[-1] == FailedStart("the test's build stops here")
    return link, link.order


def test_a_start_told_to_build_at_once_builds_without_the_standing_by_work() -> None:
    _, order = _stand_by([encode(Build())])
    assert order == [f"receive {process_server.BUILD_AT_ONCE_MS}", "build"]


def test_a_spare_does_its_standing_by_work_then_builds_when_told() -> None:
    _, order = _stand_by([None, None, encode(Build())])
    assert order[:2] == [f"receive {process_server.BUILD_AT_ONCE_MS}", "standing by"]
    assert order[-1] == "build" and order.count("build") == 1
