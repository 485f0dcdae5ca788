"""scripts.bench.bench_start: the starts its --modes ask for, the built starts with built artefacts
on and the others with them off, and each start's log where --logs says, without starting a
policy."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from scripts.bench import bench_start as bench


def _args(tmp_path: Path, modes: list[str], **more: Any) -> argparse.Namespace:
    values = {"policy": "tiny", "checkpoint": None, "device": "cpu", "top_tier": "compiled",
              "repeats": 2, "timeout": 5.0, "modes": modes, "logs": None} | more  # fmt: skip
    return argparse.Namespace(**values)


def test_only_the_modes_asked_for_are_started(tmp_path: Path, monkeypatch, capsys) -> None:
    started: list[tuple[dict[str, Any], Path | None]] = []

    def fake_start(plan: dict[str, Any], timeout_s: float, log_to: Path | None = None):
        started.append((plan, log_to))
        if log_to is not None:
            log_to.write_text("the start's log")
        return {"ok": True, "imported_s": 0.5, "ready_s": 1.0, "first_action_s": 1.25,
                "tier": "compiled", "notes": []}  # fmt: skip

    monkeypatch.setattr(bench, "one_start", fake_start)
    logs = tmp_path / "logs"
    rows = bench.run(_args(tmp_path, ["built"], logs=logs), tmp_path)
    assert [row["mode"] for row in rows] == ["build", "built", "built"]
    assert all(plan["runner"]["built_artefacts"] == "auto" for plan, _ in started)
    assert sorted(p.name for p in logs.iterdir()) == [
        "00-build.log",
        "01-built.log",
        "02-built.log",
    ]

    started.clear()
    rows = bench.run(_args(tmp_path, ["cold", "warm"]), tmp_path)
    assert [row["mode"] for row in rows] == ["cold", "cold", "warm", "warm"]
    assert all(log_to is None for _, log_to in started)
    assert all(plan["runner"]["built_artefacts"] == "off" for plan, _ in started)
    warm_cache = started[0][0]["runner"]["cache_dir"]  # the first cold start's cache
    assert [plan["runner"]["cache_dir"] for plan, _ in started[2:]] == [warm_cache, warm_cache]

    bench.print_table(_args(tmp_path, ["cold", "warm"]), rows)
    table = capsys.readouterr().out.splitlines()
    header = next(line for line in table if line.startswith("mode"))
    assert header.split()[2:4] == ["imports", "done"]
    cold = next(line for line in table if line.startswith("cold"))
    assert cold.split()[:3] == ["cold", "2", "0.50"] and "1.25" in cold


def test_warm_or_mega_without_cold_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--policy", "tiny", "--modes", "warm", "built"])
