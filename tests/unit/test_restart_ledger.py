"""RestartLedger: a failure is in the log before status (read from other threads) shows it, so a
status that counts a failure never runs ahead of the log."""

from __future__ import annotations

import logging

from controller.link.restart_ledger import RestartLedger


def test_a_failure_is_logged_before_status_shows_it() -> None:
    ledger = RestartLedger()
    seen_at_log: list[dict] = []

    class Probe(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen_at_log.append(ledger.status())

    probe = Probe()
    logger = logging.getLogger("controller.link.restart_ledger")
    logger.addHandler(probe)
    try:
        ledger.failed("exited", "the inference process exited with code -9")
        ledger.restart_failed("exited with code 7 while starting", 1.0)
        ledger.restart_failed("exited with code 7 while starting", 2.0)
    finally:
        logger.removeHandler(probe)
    first, second, third = seen_at_log
    assert first["restart_count"] == 0 and first["restarts"] == []
    assert second["restart_failure"] is None
    assert third["restart_failure"]["count"] == 1
    status = ledger.status()
    assert status["restart_count"] == 1 and status["restart_failure"]["count"] == 2
    assert [r["cause"] for r in status["restarts"]] == [
        "exited",
        "restart_failed",
        "restart_failed",
    ]
