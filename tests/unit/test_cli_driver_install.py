"""`tempo --help`, `--version` and `tempo status` on a driver's install: numpy, pyzmq and msgpack
only. Each runs in a subprocess whose imports of the serve extra fail as if not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from controller import cli
from controller.observe.status_server import StatusServer

# Makes every import of the serve extra fail as on an install without it, then runs `tempo`.
_DRIVER_INSTALL = """
import sys
BLOCKED = {blocked!r}

class RefuseServeExtra:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, RefuseServeExtra())
from controller.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _tempo_without_serve_extra(*argv: str) -> subprocess.CompletedProcess[str]:
    prelude = _DRIVER_INSTALL.format(blocked=sorted(cli.SERVE_EXTRA_MODULES))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, "-c", prelude, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_the_prelude_does_block_the_serve_extra():
    # `config show` needs pydantic and yaml: it must answer with the missing-extra sentence.
    result = _tempo_without_serve_extra("config", "show")
    assert result.returncode == 2
    assert "pip install 'tempo-controller[serve]'" in result.stderr


def test_help_and_version_need_no_serve_extra():
    helped = _tempo_without_serve_extra("--help")
    assert helped.returncode == 0, helped.stderr
    assert "status" in helped.stdout
    versioned = _tempo_without_serve_extra("--version")
    assert versioned.returncode == 0, versioned.stderr
    assert versioned.stdout.strip() == f"tempo {cli.package_version()}"


@pytest.fixture
def status_server(tmp_path):
    context = zmq.Context()
    snapshot = {
        "uptime_s": 3.0,
        "control_hz": 50.0,
        "ticks": 150,
        "achieved_hz": 49.9,
        "robots": [],
        "policy": {"tier": "eager_fp32"},
    }
    server = StatusServer(context, f"ipc://{tmp_path}/status.sock", lambda: snapshot)
    endpoint = server.start()
    yield endpoint
    server.stop()
    context.term()


def test_status_from_a_driver_install(status_server):
    shown = _tempo_without_serve_extra("status", "--connect", status_server)
    assert shown.returncode == 0, shown.stderr
    assert "policy eager_fp32" in shown.stdout
    as_json = _tempo_without_serve_extra("status", "--connect", status_server, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["ticks"] == 150


def test_status_without_a_daemon_says_where_it_asked():
    result = _tempo_without_serve_extra("status", "--timeout", "0.1")
    assert result.returncode == 1
    assert f"no daemon answered on {cli.DEFAULT_STATUS_BIND}" in result.stderr
