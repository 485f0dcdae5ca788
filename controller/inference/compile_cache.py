"""The persistent compile cache that makes a restart of the same model ready in seconds.

Two layers, both under `RunnerConfig.cache_dir`:
- inductor's own on-disk caches (FX graph cache, AOTAutograd cache, autotuning results, Triton
  kernels), pointed at `<cache_dir>/inductor`. They are keyed by torch itself on the traced graph.
- a "mega-cache" file per (model structure, runner settings, torch version, GPU):
  `torch.compiler.save_cache_artifacts()` after a cold compile, `load_cache_artifacts()` before
  the next one. It carries the same artifacts in one file that can be copied to another machine
  of the same kind (pre-warming a fleet), where the inductor directory alone would not be found.
  Where a compile here already succeeded (a restart on the same machine), inductor's directory
  is marked warm for the model and the mega-cache is not loaded: loading it costs more than it
  saves.

Both hold pickled compiler artifacts, so the directory must be trusted: it is created private to
the daemon's user (0700), and one that another user owns or may write (its `inductor/` too) is
not used, said in one log line. The mega-cache file is checked as a built package is (opened
once, not through a link, a regular file that only this user or root owns and may write:
controller.inference.artefact_files) and read from that descriptor. Dynamo's tracing still
runs on every start (a few seconds for ACT).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from controller.bounded_file import read_fd
from controller.inference.artefact_files import open_artefact
from controller.inference.artefact_identity import ArtefactRefused, trusted_folder
from controller.inference.half_weights import precasts_half_weights
from controller.runner_config import RunnerConfig
from policies.base import PolicySpec
from policies.model_hooks import hooks_of

log = logging.getLogger(__name__)

DEFERRED = "deferred (the built artefacts come first)"
REFUSED = "refused"  # the outcome's first word where the directory is not trusted: not used
# The most of a mega-cache file read (an ACT or pi0 one is tens of MB).
MAX_MEGACACHE_BYTES = 4 * 1024**3


def cache_key(
    spec: PolicySpec, module: nn.Module, config: RunnerConfig, device: torch.device
) -> str:
    """What the compiled code depends on: model structure (not weight values), the settings that
    change the graph, and the software and hardware that compiled it."""
    device_name = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    )
    tensors = [
        (name, tuple(t.shape), str(t.dtype))
        for name, t in list(module.named_parameters()) + list(module.named_buffers())
    ]
    parts = {
        "spec": spec.model_dump(mode="json"),
        "module": f"{type(module).__module__}.{type(module).__qualname__}",
        "structure": repr(module),
        "tensors": tensors,
        "settings": config.model_dump(
            mode="json",
            include={"precision", "compile_mode", "compile_backend", "fullgraph", "freezing"},
        ),
        "memory_format": channels_last_of(module),
        "module_options": dict(hooks_of(module).compile_options()),
        "half_weights": precasts_half_weights(module),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device_name,
        "python": platform.python_version(),
    }
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def channels_last_of(module: nn.Module) -> bool:
    return any(
        p.dim() == 4
        and p.is_contiguous(memory_format=torch.channels_last)
        and not p.is_contiguous()
        for p in module.parameters()
    )


def open_compile_cache(
    tier_names: Sequence[str],
    spec: PolicySpec,
    module: nn.Module,
    config: RunnerConfig,
    device: torch.device,
) -> CompileCache | None:
    """The activated cache of a runner that will compile (a graph or compiled tier) and has a
    cache_dir; None otherwise."""
    if not {"graph", "compiled"} & set(tier_names) or config.cache_dir is None:
        return None
    cache = CompileCache(config.cache_dir, cache_key(spec, module, config, device))
    # With built artefacts the compiled tiers may never call torch.compile: its mega-cache is
    # loaded only if one does (load_deferred_megacaches), not seconds before it is known.
    cache.activate(defer=config.artefacts_dir is not None and config.built_artefacts == "auto")
    return cache


_deferred: list[CompileCache] = []


def load_deferred_megacaches() -> None:
    """Before a torch.compile: load the mega-caches whose loading was deferred (process-wide,
    as torch's caches are)."""
    while _deferred:
        _deferred.pop()._load()


class CompileCache:
    """Points torch's caches at one directory and keeps the mega-cache file of one model."""

    def __init__(self, directory: Path, key: str) -> None:
        self.directory = Path(directory).expanduser()
        self.key = key
        self.file = self.directory / f"megacache-{key}.bin"
        self.outcome = "unused"

    def activate(self, defer: bool = False) -> None:
        """Before the first compile: create the directory and point inductor (and Triton, which
        inductor places under it) at it. Process-wide, like torch's own cache settings. With
        `defer`, the mega-cache is loaded by load_deferred_megacaches, if ever."""
        inductor_dir = self.directory / "inductor"
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            trusted_folder(self.directory)
            inductor_dir.mkdir(exist_ok=True, mode=0o700)
            trusted_folder(inductor_dir)
        except (ArtefactRefused, OSError) as exc:
            log.warning("compile cache not used (%s): what is cached there is code", exc)
            self.outcome = f"{REFUSED}: {exc}"
            return
        # torch reads this each time it needs the directory; it is how torch takes the setting.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)
        os.environ.pop("TRITON_CACHE_DIR", None)  # default: <inductor dir>/triton
        if defer:
            self.outcome = DEFERRED
            _deferred.append(self)
        else:
            self._load()

    @property
    def warm_marker(self) -> Path:
        """Present when inductor's directory here already holds this model's artifacts (a
        compile here succeeded): loading the mega-cache would only rewrite them, and it takes
        longer than it saves (measured on an H100: 5 to 6 s to load against 4 s saved)."""
        return self.directory / "inductor" / f"tempo-warm-{self.key}"

    def _load(self) -> None:
        loader = getattr(torch.compiler, "load_cache_artifacts", None)
        if loader is None:
            self.outcome = "unsupported by this torch"
            return
        if self.warm_marker.exists():
            self.outcome = "local (inductor's caches here are warm)"
            return
        if not os.path.lexists(self.file):
            self.outcome = "cold (no saved artifacts yet)"
            return
        try:
            with open_artefact(self.file, "mega-cache") as opened:
                data = read_fd(
                    opened.fd, MAX_MEGACACHE_BYTES, ArtefactRefused, "mega-cache", self.file
                )
        except ArtefactRefused as exc:  # replaced by the next save, as a built package is
            log.warning(
                "compile cache: %s not loaded (%s), and it is code; compiling cold", self.file, exc
            )
            self.outcome = f"cold ({self.file.name} refused: {exc})"
            return
        try:
            loader(data)
            self.outcome = "loaded"
        except Exception as exc:  # a stale or truncated file must not stop the daemon
            log.warning("compile cache %s could not be loaded (%s); compiling cold", self.file, exc)
            self.outcome = f"load failed: {exc}"

    def save(self) -> None:
        """After a successful compile: keep the artifacts, unless they came from here; mark
        inductor's directory warm for this model. Nothing when its loading is still deferred:
        nothing went through torch.compile (the built artefacts served)."""
        if self.outcome == DEFERRED or self.outcome.startswith(REFUSED):
            return
        try:
            self.warm_marker.touch()
        except OSError as exc:
            log.warning("compile cache: could not mark %s warm: %s", self.warm_marker, exc)
        saver = getattr(torch.compiler, "save_cache_artifacts", None)
        if (
            saver is None
            or self.outcome in ("loaded", DEFERRED)
            or self.outcome.startswith("local")
        ):
            return  # DEFERRED: nothing went through torch.compile; keep the file as it is
        try:
            result = saver()
            if result is None:
                return
            artifacts, _info = result
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".megacache-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(artifacts)
            os.replace(tmp, self.file)  # atomic: a crash never leaves half a file under the name
            self.outcome = f"saved {len(artifacts)} bytes"
            log.info("compile cache saved to %s (%d bytes)", self.file, len(artifacts))
        except Exception as exc:
            log.warning("compile cache could not be saved to %s: %s", self.file, exc)
            self.outcome = f"save failed: {exc}"

    def as_dict(self) -> dict[str, str]:
        return {"dir": str(self.directory), "key": self.key, "megacache": self.outcome}
