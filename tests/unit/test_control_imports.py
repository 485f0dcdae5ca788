"""The control process of `tempo serve` never loads torch: the GIL and the CPU it would take
belong to the control loop (torch lives in the inference process)."""

from __future__ import annotations

import subprocess
import sys

CONTROL_MODULES = (
    "controller.cli",
    "controller.app",
    "controller.config",
    "controller.daemon.service",
    "controller.link.remote_policy",
    "controller.observe.status_view",
)


def test_the_control_process_modules_import_without_torch() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {CONTROL_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'torch' in sys.modules:\n"
        "        sys.exit(f'{name} loads torch')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
