"""The README's complete driver example runs, as printed, against a real `tempo serve`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import daemon_process

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


def readme_driver() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Writing a driver") :]
    block = re.search(r"A complete driver.*?```python\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README.md: no complete driver example under 'Writing a driver'"
    return block.group(1)


def test_the_readme_driver_example_is_short_and_complete() -> None:
    code = readme_driver()
    assert len(code.strip().splitlines()) <= 25
    assert DEFAULT_ENDPOINT in code  # the default bind of `tempo serve`
    compile(code, "README.md", "exec")


def test_the_readme_driver_example_drives_a_daemon(tmp_path: Path) -> None:
    # The example talks to the default endpoint; tests use a private one (no fixed ports).
    code = readme_driver().replace(DEFAULT_ENDPOINT, f"ipc://{tmp_path}/tempo.sock")
    script = tmp_path / "driver.py"
    script.write_text(code)
    with daemon_process(tmp_path):
        result = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},  # this checkout's client
        )
    assert result.returncode == 0, result.stderr
    match = re.search(r"actions (\d+), holds (\d+)", result.stdout)
    assert match is not None, result.stdout
    assert int(match.group(1)) > 0, result.stdout
