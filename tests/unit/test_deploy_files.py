"""The Dockerfile and the systemd unit agree with the README and with how Tempo runs: the
unit starts the venv the README creates, as the user it creates; the image installs the
dependencies before the sources, runs as a user, checks its health with `tempo status` and
keeps the compile cache where the volume is mounted."""

from __future__ import annotations

import re
from pathlib import Path

from controller import cli

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _unit() -> dict[str, str]:
    lines = (REPO / "scripts" / "tempo.service").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if re.match(r"^[A-Za-z]+=", line))


def test_the_unit_runs_the_readmes_venv_as_its_user():
    unit = _unit()
    executable = unit["ExecStart"].split()[0]
    venv = executable.removesuffix("/bin/tempo")
    assert f"python3 -m venv {venv}" in README
    assert f"{venv}/bin/pip install '.[serve]'" in README
    assert f"useradd --system --no-create-home --shell /usr/sbin/nologin {unit['User']}" in README
    # The compile cache follows XDG_CACHE_HOME into systemd's CacheDirectory (/var/cache/NAME),
    # the status token XDG_STATE_HOME into its StateDirectory (/var/lib/NAME).
    lines = (REPO / "scripts" / "tempo.service").read_text().splitlines()
    environment = {line.removeprefix("Environment=") for line in lines if line.startswith("Env")}
    assert environment == {"XDG_CACHE_HOME=/var/cache", "XDG_STATE_HOME=/var/lib"}
    assert unit["CacheDirectory"] == "tempo" and unit["StateDirectory"] == "tempo"


def test_the_image_installs_dependencies_before_the_sources():
    lines = (REPO / "Dockerfile").read_text().splitlines()
    install = next(i for i, line in enumerate(lines) if "pip install torch==" in line)
    first_source = next(i for i, line in enumerate(lines) if line.startswith("COPY controller"))
    copied_before = [line for line in lines[:install] if line.startswith("COPY")]
    assert install < first_source
    assert copied_before == ["COPY pyproject.toml ./"]


def test_the_image_runs_as_a_user_checks_health_and_caches_in_its_volume():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^USER (?!root|0\b)\S+$", text, re.M)
    health = re.search(r"^HEALTHCHECK .*\n\s+CMD (.*)$", text, re.M)
    assert health is not None and "tempo status" in health.group(1)
    assert cli.DEFAULT_STATUS_BIND in text  # the endpoint the check asks, as documented there
    cache = re.search(r"^ENV XDG_CACHE_HOME=(\S+)$", text, re.M)
    assert cache is not None
    assert re.search(rf"^VOLUME {re.escape(cache.group(1))}$", text, re.M)
    assert f"-v tempo-cache:{cache.group(1)}" in README
    assert "build-essential" in text and "python3-dev" in text  # Triton builds its launchers
