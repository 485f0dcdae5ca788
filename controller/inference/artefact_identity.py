"""What a built artefact (controller.inference.built_artefacts) was built for, and the checks
before one is loaded: its manifest's identity against this process's, its folder's owner and
mode (its files' own, and their checksum: controller.inference.artefact_files)."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import platform
import stat
from pathlib import Path
from typing import Any

import torch
from torch import nn

from controller.errors import TempoError
from controller.inference.half_weights import precasts_half_weights
from controller.runner_config import RunnerConfig
from policies.model_hooks import hooks_of

# 2: packages built without inductor's layout optimisation (built_artefacts.package_options);
# a format-1 package built on CUDA may be wrong, so it is refused and rebuilt.
MANIFEST_FORMAT = 2
# Runner settings that change the compiled code (the rest only choose tiers and checks).
CODE_SETTINGS = {"precision", "compile_mode", "compile_backend", "freezing"}


class ArtefactRefused(TempoError):
    """A built artefact that must not be loaded; the message is the reason, one clause."""


def tempo_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tempo-controller")
    except PackageNotFoundError:
        return "unknown"


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's architecture and the instruction set inductor compiles for."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}"


def _tensors(module: nn.Module) -> list[tuple[str, tuple[int, ...], str, tuple[int, ...]]]:
    named = list(module.named_parameters()) + list(module.named_buffers())
    return [(name, tuple(t.shape), str(t.dtype), tuple(t.stride())) for name, t in named]


def code_digest(step: nn.Module) -> str:
    """A digest of the source files of the step's module classes (torch's aside: its version is
    in the identity), so that a package is not loaded by code whose forward was edited since:
    the model's structure and Tempo's version would not tell."""
    torch_dir = os.path.dirname(torch.__file__)
    files: set[str] = set()
    for each in step.modules():
        try:
            source = inspect.getsourcefile(type(each))
        except TypeError:  # defined in C
            continue
        if source is not None and not source.startswith(torch_dir):
            files.add(source)
    digest = hashlib.sha256()
    for source in sorted(files):
        with contextlib.suppress(OSError):
            digest.update(Path(source).read_bytes())
    return digest.hexdigest()[:20]


def slot_of(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> str:
    """Which model and batch-size bucket a step is: its class, structure, own settings (a
    TD-MPC2 planner and its prior share a structure, not a config) and input shapes."""
    parts = {
        "module": f"{type(module).__module__}.{type(module).__qualname__}",
        "structure": repr(module),
        "module_config": repr(getattr(module, "config", None)),
        "inputs": [(tuple(t.shape), str(t.dtype)) for t in inputs],
    }
    return digest(parts)[:16]


def identity(
    module: nn.Module,
    half: torch.dtype | None,
    inputs: tuple[torch.Tensor, ...],
    config: RunnerConfig,
    step: nn.Module | None = None,
) -> dict[str, Any]:
    """Everything a built step (`step`, default `module`) depends on; a package built for
    another identity is refused."""
    device = inputs[0].device if inputs else torch.device("cpu")
    parts = {
        "format": MANIFEST_FORMAT,
        "device": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "tempo": tempo_version(),
        "settings": config.model_dump(mode="json", include=CODE_SETTINGS),
        "half": str(half),
        "module_options": {k: repr(v) for k, v in hooks_of(module).compile_options().items()},
        "half_weights": precasts_half_weights(module),
        "tensors": [list(map(str, t)) for t in _tensors(module)],
        "inputs": [(list(t.shape), str(t.dtype), list(t.stride())) for t in inputs],
        "slot": slot_of(module, inputs),
        "code": code_digest(module if step is None else step),
    }
    return json.loads(json.dumps(parts, default=str))  # as read back from the manifest


def digest(parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_NAMES = {
    "device": "device",
    "torch": "torch",
    "cuda": "CUDA",
    "python": "Python",
    "tempo": "Tempo",
    "settings": "runner settings",
    "code": "model code",
}


def differences(built: dict[str, Any], here: dict[str, Any]) -> str:
    """'built for torch 2.11.0, this is 2.13.0; ...' for the fields that differ."""
    said = []
    for key, name in _NAMES.items():
        if built.get(key) != here.get(key):
            said.append(f"built for {name} {built.get(key)}, this is {here.get(key)}")
    other = sorted(
        k for k in set(built) | set(here) if k not in _NAMES and built.get(k) != here.get(k)
    )
    if other:
        said.append(f"built for another {', '.join(other)}")
    return "; ".join(said)


def trusted_folder(folder: Path) -> None:
    """Refuse a folder that another user owns or may write: what is loaded from it runs here."""
    info = folder.stat()
    if info.st_uid != os.getuid():
        raise ArtefactRefused(f"{folder} belongs to another user")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ArtefactRefused(f"{folder} is writable by other users")
