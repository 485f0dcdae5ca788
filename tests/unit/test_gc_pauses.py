"""Garbage collections in the daemon's process are timed into telemetry."""

from __future__ import annotations

import gc

from controller.observe.gc_pauses import GcPauses
from controller.observe.telemetry import GC_PAUSE, Telemetry


def test_every_collection_is_timed_while_installed() -> None:
    telemetry = Telemetry()
    pauses = GcPauses(telemetry).install()
    try:
        gc.collect(0)
        gc.collect()
    finally:
        pauses.remove()
    gc.collect()  # not timed any more
    section = telemetry.snapshot()["sections"][GC_PAUSE]
    # At least ours: a thread of an earlier test may trigger one more meanwhile.
    assert section["count"] >= 2 and section["max_s"] > 0


def test_disabled_telemetry_installs_nothing() -> None:
    before = list(gc.callbacks)
    GcPauses(Telemetry(enabled=False)).install()
    assert gc.callbacks == before
