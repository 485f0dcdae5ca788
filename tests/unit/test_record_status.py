"""The flight recorder in `tempo status` and /metrics: written, dropped by kind, incidents,
files deleted to stay within record.max_total_mb."""

from __future__ import annotations

from typing import Any

from controller.observe.metrics_export import TempoCollector
from controller.observe.status_view import recording_line, render_status

RECORDING = {
    "mode": "ring",
    "dir": "/data/rec",
    "queued": 120,
    "written": 100,
    "dropped": {"observation": 3, "command": 2, "chunk": 0},
    "queue_length": 0,
    "queue_capacity": 4096,
    "files": 1,
    "current_file": None,
    "incidents": 1,
    "error": None,
}


def test_status_shows_what_the_recorder_wrote_and_dropped() -> None:
    line = recording_line(RECORDING)
    assert line == (
        "recording ring to /data/rec: 100 records written, 5 dropped (command 2, "
        "observation 3), 1 files, 1 incidents"
    )
    assert line in render_status({"recording": RECORDING, "robots": []})
    assert "recording" not in render_status({"recording": None, "robots": []})
    failed = recording_line({**RECORDING, "error": "OSError: disk full"})
    assert failed.endswith("; stopped writing: OSError: disk full")
    torn = recording_line({**RECORDING, "torn_frames": 2})
    assert "; 2 observations' frames left out (the driver wrote over its slot" in torn
    assert "deleted" not in line  # only once a cap has deleted something
    deleted = recording_line({**RECORDING, "files_deleted": 3, "bytes_deleted": 3 * 2**20})
    assert "; 3 oldest files deleted (3 MiB) to stay within max_total_mb" in deleted
    assert "; 4 records left out (a value JSON cannot hold" in recording_line(
        {**RECORDING, "not_json": 4}
    )


def test_metrics_export_the_recorders_counters() -> None:
    status: dict[str, Any] = {"recording": RECORDING}
    families = {f.name: f for f in TempoCollector(lambda: {}, lambda: status).collect()}
    dropped = {s.labels["kind"]: s.value for s in families["tempo_recording_dropped"].samples}
    assert dropped == {"observation": 3, "command": 2, "chunk": 0}
    assert families["tempo_recording_records_written"].samples[0].value == 100
    assert families["tempo_recording_incidents"].samples[0].value == 1
    deleted = {**RECORDING, "files_deleted": 2, "bytes_deleted": 5_000, "not_json": 1}
    families = {
        f.name: f for f in TempoCollector(lambda: {}, lambda: {"recording": deleted}).collect()
    }
    assert families["tempo_recording_files_deleted"].samples[0].value == 2
    assert families["tempo_recording_deleted_bytes"].samples[0].value == 5_000
    assert families["tempo_recording_not_json"].samples[0].value == 1
