"""scripts.soak.bench_recording: its options, the policy settings it serves, its MCAP sizes and
its table, without running a daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.soak import bench_recording as bench


def test_modes_alternate_in_the_order_given_and_unknown_ones_are_refused():
    args = bench.parse_args(["--modes", "ring, off", "--seconds", "3"])
    assert args.modes == ["ring", "off"]
    assert bench.parse_args([]).modes == ["off", "continuous", "ring"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--modes", "off,sometimes"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--repeats", "0"])


def test_reach_serves_the_requested_cameras_as_a_valid_config():
    from controller.config import load_config

    args = bench.parse_args(["--policy", "reach", "--cameras", "3", "--height", "48"])
    config = load_config(None, bench.policy_sets(args, Path("/nonexistent")))
    assert [(c.name, c.height, c.width) for c in config.robot.cameras] == [
        ("cam0", 48, 640),
        ("cam1", 48, 640),
        ("cam2", 48, 640),
    ]


def test_content_bytes_reads_the_uncompressed_size_and_none_for_a_cut_file(tmp_path):
    from controller.record.mcap_file import McapFile

    path = tmp_path / "a.mcap"
    file = McapFile(path, {})
    payload = b"\x10" * 200_000  # compresses to almost nothing
    file.write("/r/command", "tempo.Command", 1, 1, payload)
    file.close()
    size = bench.content_bytes([path])
    assert size is not None and size >= len(payload) > path.stat().st_size
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert bench.content_bytes([path, cut]) is None


def test_table_shows_each_run_its_drops_by_kind_and_the_spread():
    args = bench.parse_args(["--modes", "off,continuous", "--repeats", "2"])
    run = {
        "tick_lateness_us_p50": 12.0,
        "tick_lateness_us_p99": 80.0,
        "tick_lateness_us_max": 900.0,
        "missed_ticks": 0,
        "mb_written": 1.5,
        "mb_per_s": 0.25,
    }
    runs = [
        {**run, "mode": "off", "records_dropped": None},
        {**run, "mode": "continuous", "records_dropped": {"observation": 7, "command": 0}},
        {**run, "mode": "off", "tick_lateness_us_p99": 95.0, "records_dropped": None},
        {**run, "mode": "continuous", "missed_ticks": 2, "records_dropped": {"command": 0}},
    ]
    text = bench.table(args, runs)
    rows = text.splitlines()
    assert rows[4].split()[:5] == ["off", "12", "80", "900", "0"]
    assert rows[5].endswith("observation:7")
    assert rows[7].endswith("  0")
    assert "off  p99 us 80..95, missed 0..0" in text
    assert "continuous  p99 us 80..80, missed 0..2" in text
