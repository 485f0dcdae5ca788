"""`tempo bench` runs the tier benchmark (here on the tiny policy, eager only: seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")


def test_tempo_bench_tiny_on_cpu_prints_a_table_and_json(tmp_path):
    out = tmp_path / "bench.json"
    temp = tmp_path / "tmp"  # where the bench's own compile cache goes: removed at the end
    temp.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "bench",
            "--tiny",
            "--device",
            "cpu",
            "--iters",
            "5",
            "--warmup",
            "2",
            "--no-warm-start",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    assert result.returncode == 0, result.stderr
    assert "eager_fp32" in result.stdout
    # The targets are the H200's for ACT at ALOHA shapes: on a CPU they are not compared.
    assert "targets: not compared" in result.stdout and "FAIL" not in result.stdout
    assert "timing eager_fp32" in result.stderr  # progress while it times
    report = json.loads(out.read_text())
    assert report["serving_tier"] == "eager_fp32"
    assert report["tiers"]["eager_fp32"]["step"]["median_ms"] > 0
    assert report["targets"] == {} and "H200" in report["targets_skipped"]
    assert list(temp.iterdir()) == []


def test_tempo_bench_help_names_the_command():
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "bench", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.startswith("usage: tempo bench")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("bench", ["--tiny", "--tdmpc2"])
def test_tempo_bench_refuses_cuda_without_a_gpu_in_one_sentence(bench):
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "bench", bench, "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "tempo bench: --device is 'cuda' but PyTorch sees no CUDA GPU; install a CUDA build of "
        "PyTorch, check the driver, or set --device=cpu"
    )
    assert result.stdout == ""
