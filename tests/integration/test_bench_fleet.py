"""Short CPU runs of scripts.fleet.bench_fleet with the tiny policy: what each mode reports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # where `python -m scripts...` finds scripts/


def _bench(tmp_path: Path, *args: str) -> tuple[list[dict], str]:
    rows_file = tmp_path / "rows.json"
    bench = ["scripts.fleet.bench_fleet", "--tiny", "--json", str(rows_file), *args]
    result = subprocess.run(
        [sys.executable, "-m", *bench],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(rows_file.read_text()), result.stdout


def test_admission_refuses_the_extra_robot_with_numbers_and_mixed_reports_each_policy(
    tmp_path: Path,
) -> None:
    # 10 Hz control; admission's policy queried every 10th step (robots at 1 Hz) keeps its
    # load under 1 on a busy CPU (a step of batch 2 took up to 0.2 s there); the watchdog
    # waits longer than a robot period.
    rows, out = _bench(
        tmp_path, "--rate", "10", "--seconds", "2.5", "--batch-sizes", "1", "2",
        "--set", "execution.query_period=10", "--set", "guards.hold_after_ms=1500",
        "--set", "guards.stop_after_ms=3000",
        "--mixed", "--mixed-robots", "act=2", "pi0=1", "--pi0-query-period", "2",
        "--admission", "2",
    )  # fmt: skip
    by_mode = {}
    for row in rows:
        by_mode.setdefault(row["mode"], []).append(row)

    (admission,) = by_mode["admission"]
    assert admission["admitted"] == 2, admission
    (refusal,) = admission["refused"]
    assert refusal["hello"] == 3 and refusal["robot"] == "r2"
    numbers = re.search(r"serving 2 robots needing ([\d.]+) of its inference time, one more "
                        r"needs ([\d.]+), it can give ([\d.]+)", refusal["sentence"])  # fmt: skip
    assert numbers is not None, refusal["sentence"]
    assert float(numbers.group(3)) == round(admission["max_load"], 2)
    assert admission["load_n"] < admission["max_load"] < admission["load_n_plus_1"]
    # The admitted robots kept being served after the refusal, without a lost message.
    assert admission["admitted_lost"] == 0, admission
    after = admission["admitted_chunks_after_refusal"]
    assert all(chunks > 0 for chunks in after.values()), admission
    assert "hello 3 (r2) refused" in out

    policies = {row["policy"]: row for row in by_mode["mixed"]}
    assert set(policies) == {"act", "pi0", "(daemon)"}
    act, pi0 = policies["act"], policies["pi0"]
    assert (act["robots"], pi0["robots"]) == (2, 1)
    # Each robot at its own policy's rate, its deadline one of its periods.
    assert (act["rate_hz"], pi0["rate_hz"]) == (10.0, 5.0)
    assert (act["deadline_ms"], pi0["deadline_ms"]) == (100.0, 200.0)
    # The deadline counted in control ticks: each policy's query period.
    assert (act["deadline_ticks"], pi0["deadline_ticks"]) == (1, 2)
    assert act["drive"] == pi0["drive"] == "tick"
    for row in (act, pi0):
        assert row["chunks"] > 0 and row["obs_to_action_p99_ms"] > 0, row
        assert isinstance(row["all_on_time"], bool) and row["lost"] >= 0
        assert {r["policy"] for r in row["per_robot"]} == {row["policy"]}
    assert isinstance(policies["(daemon)"]["missed_ticks"], int)
    assert "deadline: a chunk is on time" in out
    # The daemon's own split of the path, from its telemetry (the robots' chunks went through it).
    daemon = policies["(daemon)"]
    assert daemon["daemon_inference_p99_ms"] > 0 and daemon["daemon_obs_to_action_p99_ms"] > 0
    assert daemon["daemon_wait_p99_ms"] >= 0
    assert "every policy together, p99: wait" in out


def test_saturation_reports_the_throughput_ratio_and_bucket_step_times(tmp_path: Path) -> None:
    rows, out = _bench(tmp_path, "--saturate", "--robots", "2", "--saturate-rate", "20",
                       "--seconds", "2", "--batch-sizes", "1", "2")  # fmt: skip
    runs = [row for row in rows if row["mode"] == "saturate"]
    assert [row["batch_sizes"] for row in runs] == [[1], [1, 2]]
    for row in runs:
        assert row["robots"] == 2 and row["robot_steps_per_s"] > 0
        assert row["gpu_util"] == "n/a" or "mean_pct" in row["gpu_util"]
    # The runner's measured step per bucket: the one-by-one daemon has only batch 1.
    assert set(runs[0]["step_ms_by_bucket"]) == {"1"}
    assert set(runs[1]["step_ms_by_bucket"]) == {"1", "2"}
    (ratio,) = [row for row in rows if row["mode"] == "ratios"]
    expected = runs[1]["robot_steps_per_s"] / runs[0]["robot_steps_per_s"]
    assert abs(ratio["throughput_vs_one_after_another"] - expected) < 1e-9
    assert "throughput batched / one-by-one" in out
