"""Inference processes start below the control loop's CPU priority only where they can come
back up once built: never to serve for good below the daemon."""

from __future__ import annotations

import io
import resource

import pytest

from controller.link import process_spawner
from controller.link.process_spawner import Spawner, priority_can_be_restored


@pytest.fixture
def unprivileged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_spawner.os, "geteuid", lambda: 1000)
    no_caps = "Name:\tpython\nCapEff:\t0000000000000000\n"
    monkeypatch.setattr("builtins.open", lambda *a, **k: io.StringIO(no_caps))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (0, 0))
    monkeypatch.setattr(process_spawner.os, "getpriority", lambda which, who: 0)


def test_root_may_restore_a_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_spawner.os, "geteuid", lambda: 0)
    assert priority_can_be_restored()
    assert Spawner(["true"], nice=10).nice == 10


def test_a_user_without_the_right_starts_children_at_the_loops_priority(unprivileged: None) -> None:
    assert not priority_can_be_restored()
    assert Spawner(["true"], nice=10).nice == 0


def test_cap_sys_nice_or_rlimit_nice_is_enough(
    unprivileged: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    capable = "CapEff:\t0000000000800000\n"  # bit 23
    monkeypatch.setattr("builtins.open", lambda *a, **k: io.StringIO(capable))
    assert priority_can_be_restored()
    monkeypatch.setattr("builtins.open", lambda *a, **k: io.StringIO("CapEff:\t0\n"))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (20, 20))  # nice floor 0: ours
    assert priority_can_be_restored()
