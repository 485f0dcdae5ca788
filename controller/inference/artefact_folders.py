"""Where a policy's built artefacts (controller.inference.built_artefacts) live: beside its
checkpoint (`tempo_build/`), else in the compile cache's `built/` folder; how serve finds them
and where `tempo build` puts them."""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from pathlib import Path

from controller.errors import ConfigError
from controller.policy_sections import PolicyConfig
from controller.runner_config import RunnerConfig

log = logging.getLogger(__name__)

BUILD_FOLDER = "tempo_build"  # beside the checkpoint


def _cache_folder(policy: PolicyConfig, cache_dir: Path) -> Path:
    """The compile cache's folder for a policy whose checkpoint folder is not writable (or
    that has none): one per checkpoint path (or policy settings)."""
    described = policy.model_dump(mode="json")
    if policy.path is not None:
        described["path"] = str(Path(policy.path).expanduser().resolve())
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir).expanduser() / "built" / digest[:16]


def artefact_folders(policy: PolicyConfig, runner: RunnerConfig) -> list[Path]:
    """Where a policy's artefacts may be, first choice first: beside its checkpoint, then the
    compile cache."""
    folders = []
    if policy.path is not None:
        folders.append(Path(policy.path).expanduser() / BUILD_FOLDER)
    if runner.cache_dir is not None:
        folders.append(_cache_folder(policy, runner.cache_dir))
    return folders


def with_built_artefacts(runner: RunnerConfig, policy: PolicyConfig) -> RunnerConfig:
    """`runner` with `artefacts_dir` set to the folder `tempo build` made for this policy, when
    there is one (and it is neither set nor turned off)."""
    if runner.artefacts_dir is not None or runner.built_artefacts == "off":
        return runner
    for folder in artefact_folders(policy, runner):
        if folder.is_dir():
            return runner.model_copy(update={"artefacts_dir": folder})
    return runner


def folder_to_build(runner: RunnerConfig, policy: PolicyConfig) -> Path:
    """Where `tempo build` puts the artefacts: `artefacts_dir` when set, else the first of
    `artefact_folders` that can be created and written (private to this user)."""
    if runner.artefacts_dir is not None:
        candidates = [Path(runner.artefacts_dir).expanduser()]
    else:
        candidates = artefact_folders(policy, runner)
    for folder in candidates:
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-")
            probe.close()
            return folder
        except OSError as exc:
            log.info("built artefacts: %s is not writable (%s)", folder, exc)
    raise ConfigError(
        "no folder to keep the built artefacts in: the checkpoint's folder is not writable "
        "and runner.cache_dir is null; set runner.artefacts_dir"
    )
