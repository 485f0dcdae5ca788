"""Triton kernels tested on the CPU: a script run in a child process under Triton's interpreter
(chosen when triton is first imported, so not in this process), skipped where triton is not
installed (it ships with torch's CUDA wheels, not the CPU ones)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or not hasattr(torch.library, "triton_op"),
    reason="needs triton (it ships with torch's CUDA wheels) and torch >= 2.6",
)


def run_interpreted(script: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`script` (Python source) run from the repository root with TRITON_INTERPRET=1."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout_s,
    )  # fmt: skip
