"""scripts.measure: the two relative errors keep their own meanings, the percentile says when it
has no samples, and the table lines up."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.inference import parity
from controller.observe.percentiles import summarize
from scripts.measure import max_relative_error, percentile, relative_error, shown, table


def test_the_two_relative_errors_differ_as_documented() -> None:
    ours = np.array([1.0, 2.0, 3.0, 0.0])
    reference = np.array([1.0, 2.0, 4.0, 0.0])
    assert max_relative_error(ours, reference) == pytest.approx(0.25)  # max|d| 1 / max|ref| 4
    assert relative_error(ours, reference) == pytest.approx(1 / math.sqrt(21))  # ||d|| / ||ref||
    assert relative_error(ours, reference) == parity.relative_error(ours, reference)


def test_torch_tensors_give_the_arrays_figures() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    ours, reference = rng.standard_normal((2, 5, 7)).astype(np.float32)
    as_tensors = torch.from_numpy(ours), torch.from_numpy(reference)
    assert max_relative_error(*as_tensors) == max_relative_error(ours, reference)
    assert relative_error(*as_tensors) == relative_error(ours, reference)
    half = torch.from_numpy(reference).bfloat16()  # numpy reads no BF16: converted first
    assert max_relative_error(half, half) == 0.0


@pytest.mark.parametrize(
    ("ours", "reference"),
    [
        ([1.0, float("nan")], [1.0, 1.0]),
        ([1.0, 1.0], [float("inf"), 1.0]),
        ([0.0, 0.0], [0.0, 0.0]),  # a reference of zeros: no scale to compare with
        ([], []),
    ],
)
def test_max_relative_error_is_infinite_where_nothing_is_proved(
    ours: list[float], reference: list[float]
) -> None:
    assert max_relative_error(np.array(ours), np.array(reference)) == float("inf")


def test_percentile_is_summarize_s_and_none_without_samples() -> None:
    samples = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    assert percentile(samples, 50) == summarize(samples).p50
    assert percentile(samples, 99) == summarize(samples).p99
    assert percentile([], 99) is None


def test_table_right_aligns_each_column_under_its_heading() -> None:
    rows: list[dict[str, Any]] = [
        {"robots": 1, "p99": 2.345, "late": None},
        {"robots": 16, "p99": 123.0},
    ]
    lines = table(rows, [("robots", "robots"), ("p99 ms", "p99"), ("late", "late")]).split("\n")
    assert lines == [
        "robots  p99 ms  late",
        "     1    2.35     -",
        "    16   123.0     -",
    ]
    assert shown({"1": 3, "2": 0.5}) == "1:3 2:0.50" and shown([1, 2]) == "1,2"


def test_importing_it_imports_no_torch() -> None:
    """The fleet's robot processes import it and stay free of torch."""
    probe = "import sys, scripts.measure; print('torch' in sys.modules)"
    repo = Path(__file__).resolve().parents[2]
    answer = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=repo, check=False
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() == "False"
