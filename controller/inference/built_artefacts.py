"""Artefacts of the compiled step built ahead of time (`tempo build`), so a start loads code
instead of tracing and compiling it.

An artefact is an AOTInductor package of the whole step (`torch.export`, then
`aoti_compile_and_package`), loaded by AOTInductor's C++ loader: no dynamo tracing at start. The
package does not embed the weights (`aot_inductor.package_constants_in_so` off): at load the
module's own parameters and buffers are handed to it (`load_constants`, user managed), so the
package does not depend on the checkpoint's weight values, only on its structure. The graph tier
captures the loaded callable in a CUDA graph as it captures a torch.compile'd step.

Each step (one per model and batch-size bucket) has a slot in the artefacts folder:
`step-<slot>.pt2` and its manifest `step-<slot>.json` (JSON, no pickle), which records what the
package was built for (GPU or CPU, torch, CUDA, Python and Tempo versions, the runner settings
that change the code, the model's tensors, inputs and source files: artefact_identity) and the
package's SHA-256. A package whose manifest differs from this process's, or whose bytes do not
match, is refused with one line and rebuilt in its slot (where the folder is: artefact_folders).
A model that torch.export cannot export, or that compiles by regions (pi0), takes the
compile-cache route (torch.compile and the mega-cache, controller.inference.compile_cache); its
manifest says so, so the next start does not try to export it again.

On CUDA a package is first loaded by a fresh process (`_load_in_a_child`), so that a crashing
loader is not the inference process's crash. A package that fails there is recorded as taking
the compile-cache route, with the reason. On the H100 and H200 machines measured (torch
2.11+cu130) the loader died (SIGSEGV, in std::regex) where the machine's CXX,
/opt/gcc/bin/g++, had linked libstdc++ into the package statically; built with the system's g++
the packages load. Three more faults, each found on an H200 and fixed here: the container's
pool of model instances waits on CUDA events, which a graph capture forbids (loaded
single-threaded: _open_package); aoti_load_package spent 44 s describing the machine (the C++
loader is made directly: _open_package); inductor's layout optimisation made ACT-ALOHA's FP16
package 0.162 off the eager step (turned off: package_options). Since, ACT-ALOHA, TD-MPC2 and
flow-aloha serve their graph tier from packages on an H200, loaded in 0.1-0.2 s.

A package is code: it is loaded only from the checkpoint's `tempo_build/` folder or the private
compile cache, never from a folder other users may write, and must be trusted like the checkpoint.
Its files too: a package or manifest that another user owns or may write, or a link, is refused
and rebuilt; each is opened once and checked, hashed and loaded from that one descriptor
(controller.inference.artefact_files).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from controller.inference.artefact_files import open_artefact, read_manifest
from controller.inference.artefact_identity import (
    ArtefactRefused,
    differences,
    file_sha256,
    identity,
    trusted_folder,
)
from controller.runner_config import RunnerConfig
from policies.model_hooks import compiles_regions, hooks_of

log = logging.getLogger(__name__)

Outputs = tuple[torch.Tensor, ...]
Step = Callable[..., Outputs]

# What the fresh process runs on a new package (its path in argv[1]).
# As _open_package opens it; torch alone, so that a child without Tempo on its path still says
# something of the package, not of the import.
LOAD_CHECK = (
    "import sys, torch; torch._C._aoti.AOTIModelPackageLoader(sys.argv[1], 'model', True, 1, -1)"
)
LOAD_CHECK_TIMEOUT_S = 300.0


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)  # a crash never leaves half a file under the name


class _NotBuilt(Exception):
    """No artefact in the slot yet."""


class _CompileCacheRoute(Exception):
    """The slot records that this model takes the compile-cache route; the message says why."""


class _LoadFails(Exception):
    """A new package that a fresh process could not load; the message says how it failed.
    `lasting`: the loader's own failure (a signal, an error), recorded so the next start does
    not try again; not a timeout, no process, or no memory, which the next may not meet."""

    def __init__(self, why: str, lasting: bool) -> None:
        super().__init__(why)
        self.lasting = lasting


class BuiltArtefacts:
    """One artefacts folder: loads a step's package, or refuses it and builds it again."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder).expanduser()

    def paths(self, slot: str) -> tuple[Path, Path]:
        return self.folder / f"step-{slot}.pt2", self.folder / f"step-{slot}.json"

    def step(
        self,
        step: nn.Module,
        module: nn.Module,
        half: torch.dtype | None,
        inputs: tuple[torch.Tensor, ...],
        config: RunnerConfig,
    ) -> tuple[Step | None, str]:
        """(The loaded or newly built step, what was done) for `step` (the module wrapped as
        the compiled step; `module` the model inside it); (None, why) where the compile-cache
        route must be taken instead."""
        reason = _not_exportable_reason(module, config)
        if reason is not None:
            return None, f"{reason}, so it takes the compile-cache route"
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            trusted_folder(self.folder)
        except (ArtefactRefused, OSError) as exc:
            return None, f"nothing loaded from {self.folder}: {exc}, and a built artefact is code"
        here = identity(module, half, inputs, config, step)
        package, manifest = self.paths(here["slot"])
        try:
            return self._load(step, here, package, manifest)
        except _CompileCacheRoute as exc:
            return None, f"this model takes the compile-cache route ({exc})"
        except _NotBuilt:
            why = f"none built for this model in {self.folder}"
        except ArtefactRefused as exc:
            why = f"{package.name} refused ({exc})"
            log.warning("built artefacts: %s; rebuilding it", why)
        started = time.perf_counter()
        try:
            compiled = self._build(step, inputs, module, here, package, manifest, config)
        except ArtefactRefused as exc:  # what was just built does not load: do not retry
            return None, f"{why}; the rebuilt {package.name} was refused too ({exc})"
        except _LoadFails as exc:
            reason = f"AOTInductor's package did not load in a fresh process: {exc}"
            if exc.lasting:  # this torch's loader: the next start skips the try
                self._save_manifest(manifest, here, route="compile cache", reason=reason)
            return None, f"{why}; {reason}, so it takes the compile-cache route"
        except Exception as exc:  # noqa: BLE001 - export or AOT compile: the compile cache serves
            reason = f"torch.export or AOTInductor failed: {_first_line(exc)}"
            if not _may_pass_next_time(exc):  # the model's own: the next start skips the try
                self._save_manifest(manifest, here, route="compile cache", reason=reason)
            return None, f"{why}; {reason}, so it takes the compile-cache route"
        took = time.perf_counter() - started
        return compiled, f"{why}; built {package} in {took:.1f} s"

    def _load(
        self, step: nn.Module, here: dict[str, Any], package: Path, manifest: Path
    ) -> tuple[Step, str]:
        if not os.path.lexists(manifest):
            raise _NotBuilt
        record = read_manifest(manifest)
        try:
            built_for, route = record["identity"], record["route"]
        except KeyError as exc:
            raise ArtefactRefused(f"its manifest is unreadable: it has no {exc}") from None
        if not isinstance(built_for, dict):
            raise ArtefactRefused("its manifest is unreadable: its identity is not an object")
        if built_for != here:
            raise ArtefactRefused(differences(built_for, here))
        if route != "aoti":
            raise _CompileCacheRoute(str(record.get("reason", "recorded at build")))
        if not os.path.lexists(package):
            raise ArtefactRefused("its package is missing")
        started = time.perf_counter()
        compiled = _load_checked(package, step, record.get("sha256"))
        took = time.perf_counter() - started
        return compiled, f"loaded {package} (AOTInductor, no tracing) in {took:.1f} s"

    def _build(
        self,
        step: nn.Module,
        inputs: tuple[torch.Tensor, ...],
        module: nn.Module,
        here: dict[str, Any],
        package: Path,
        manifest: Path,
        config: RunnerConfig,
    ) -> Step:
        from torch._inductor import aoti_compile_and_package

        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        exported = torch.export.export(step, inputs, strict=False)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".pt2")
        os.close(fd)
        try:
            options = package_options(module, config)
            aoti_compile_and_package(exported, package_path=tmp, inductor_configs=options)
            if _checks_load_in_a_child(inputs[0].device.type if inputs else "cpu"):
                failed = _load_in_a_child(Path(tmp))
                if failed is not None:
                    raise _LoadFails(*failed)
            digest = file_sha256(Path(tmp))
            os.replace(tmp, package)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._save_manifest(manifest, here, route="aoti", sha256=digest)
        return _load_checked(package, step, digest)

    def _save_manifest(self, manifest: Path, here: dict[str, Any], **record: object) -> None:
        """Written last, atomically: a slot with a manifest has its package complete."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            body = {"identity": here, **record}
            _write_atomically(manifest, json.dumps(body, indent=1, sort_keys=True).encode())
        except OSError as exc:
            log.warning("built artefacts: could not write %s: %s", manifest, exc)


def package_options(module: nn.Module, config: RunnerConfig) -> dict[str, Any]:
    """Inductor settings of the package: the compile mode's and the module's own, as the
    compiled tier has them, and the weights left out of the package (handed over at load)."""
    from torch._inductor import list_mode_options

    options: dict[str, Any] = dict(list_mode_options(config.compile_mode))
    options.pop("triton.cudagraphs", None)  # the graph tier captures its own graph
    options.update(hooks_of(module).compile_options())
    options["aot_inductor.package_constants_in_so"] = False
    # Inductor's layout optimisation (on CUDA, convolutions moved to channels-last where it
    # judges it pays) made ACT-ALOHA's FP16 package wrong on an H200: 0.162 off the eager step,
    # its weights handed over or inside; 9.8e-4 with it off (scripts/parity/check_aoti_package.py).
    options["layout_optimization"] = False
    return options


def _checks_load_in_a_child(device_type: str) -> bool:
    """Whether a new package is first loaded by a fresh process: on CUDA (see the module doc)."""
    return device_type == "cuda"


def _load_in_a_child(package: Path) -> tuple[str, bool] | None:
    """None where a fresh Python loads `package`; else (how it failed in a few words, whether
    the failure is the loader's own: see _LoadFails)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", LOAD_CHECK, str(package)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=LOAD_CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"it had not loaded after {LOAD_CHECK_TIMEOUT_S:.0f} s", False
    except OSError as exc:
        return f"no process could be started ({exc.strerror})", False
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        return (
            f"the loading process was killed by signal {-done.returncode} (compiled by "
            f"{_cpp_compiler()}; loaders crashed so where the compiler had linked libstdc++ "
            "into the package statically, and CXX names another compiler)"
        ), True
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    last = lines[-1][:200] if lines else "no message"
    out_of_memory = "OutOfMemoryError" in last or "out of memory" in last.lower()
    return f"exit {done.returncode}: {last}", not out_of_memory


def _cpp_compiler() -> str:
    """The C++ compiler inductor builds packages with (CXX, else what it finds)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return str(get_cpp_compiler())
    except Exception:  # noqa: BLE001 - only named in a message
        return "the C++ compiler inductor picks"


def _may_pass_next_time(exc: BaseException) -> bool:
    """A failure of the machine (disk, memory), not of the model: not recorded, so that the
    next start tries to build again."""
    return isinstance(exc, OSError | MemoryError | torch.OutOfMemoryError)


def _not_exportable_reason(module: nn.Module, config: RunnerConfig) -> str | None:
    if compiles_regions(module):
        return "this model compiles by regions"
    if config.compile_backend != "inductor":
        return f"compile_backend is {config.compile_backend}"
    if config.freezing:
        return "freezing folds the weights into the code"
    return None


def _constants_of(step: nn.Module) -> dict[str, torch.Tensor]:
    named: list[tuple[str, torch.Tensor]] = list(step.named_parameters(remove_duplicate=False))
    named += list(step.named_buffers(remove_duplicate=False))
    return {name: tensor.detach() for name, tensor in named}


def _open_package(package: Path) -> Any:
    """The package's model, its weights not yet set: AOTInductor's C++ loader, made directly.
    Not aoti_load_package, which first describes this machine to compare with the package's
    metadata, for a warning only (the manifest's identity already refuses another machine): in
    torch 2.11 that starts a Python importing torch per CPU instruction set, 44 s of a 49 s load
    of ACT-ALOHA's package on an H200 (scripts/parity/check_aoti_package.py). Nor its Python
    wrapper, whose import brings in torch's compiler (seconds at start) that a built start never
    uses.

    Single-threaded: without the container's pool of model instances, whose bookkeeping
    queries and waits on CUDA events, which a CUDA graph capture forbids (ACT's package failed
    its capture so: "operation not permitted when stream is capturing"). The runner's lock
    lets one thread at a time step it."""
    return torch._C._aoti.AOTIModelPackageLoader(str(package), "model", True, 1, -1)


def _load_checked(package: Path, step: nn.Module, sha256: object) -> Step:
    """The package loaded from one descriptor, checked (owner, mode, a regular file) and hashed
    first: the loader opens that descriptor's inode (controller.inference.artefact_files)."""
    with open_artefact(package, "package") as opened:
        if opened.sha256() != sha256:
            raise ArtefactRefused("its package does not match the checksum it was built with")
        return _load_package(opened.path_for_loader, step)


def _load_package(package: Path, step: nn.Module) -> Step:
    """The package loaded with the module's own tensors as its weights."""
    try:
        loaded = _open_package(package)
        mine = _constants_of(step)
        wanted = loaded.get_constant_fqns()
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign archive
        raise ArtefactRefused(f"it could not be loaded: {_first_line(exc)}") from None
    missing = [name for name in wanted if name not in mine]
    if missing:
        raise ArtefactRefused(f"it wants tensors the model does not have: {missing[:3]}")
    # Without every constant set, running the package crashes the process: check_full_update.
    # (constants, use_inactive, check_full_update, user_managed): the model's tensors are used
    # where they are, not copied.
    loaded.load_constants({name: mine[name] for name in wanted}, False, True, True)
    return PackageStep(loaded)


class PackageStep:
    """A loaded package as the step's callable. The output's tree spec (JSON) is parsed once,
    and the inputs, a flat tuple of tensors already, go straight to the loader."""

    def __init__(self, loader: Any) -> None:
        from torch.utils import _pytree

        self._loader = loader  # keeps the loaded library alive
        self._run = loader.boxed_run
        self._out_spec = _pytree.treespec_loads(loader.get_call_spec()[1])
        self._unflatten = _pytree.tree_unflatten

    def __call__(self, *inputs: torch.Tensor) -> Outputs:
        return self._unflatten(self._run(list(inputs)), self._out_spec)  # type: ignore[no-any-return]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def built_step(
    step: nn.Module,
    module: nn.Module,
    half: torch.dtype | None,
    inputs: tuple[torch.Tensor, ...],
    config: RunnerConfig,
) -> Step | None:
    """The compiled tiers' hook: the step from the built artefacts when the runner has an
    artefacts folder (said in one log line), else None: compile it as before."""
    if config.artefacts_dir is None or config.built_artefacts == "off":
        return None
    loaded, note = BuiltArtefacts(config.artefacts_dir).step(step, module, half, inputs, config)
    log.info("built artefacts: %s", note)
    return loaded
