"""Integration tests run real-time loops inside the pytest process."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture(autouse=True)
def _freeze_test_process_objects():
    """The daemon freezes its start-up objects out of the garbage collector, as `tempo serve`
    does; inside pytest, everything the earlier tests left behind would still be scanned by
    every full collection, a pause of milliseconds on the control loop that a real daemon never
    sees. Freeze it too (cheap: no collection, just a move to the permanent generation)."""
    gc.freeze()
    yield
