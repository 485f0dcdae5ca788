"""Hostile built artefacts (`tempo build`'s packages and manifests, in a private folder): a
file another user owns or may write, a link, a pipe or a manifest nested 100,000 deep is
refused in one clause and rebuilt, never loaded, never a hang or a traceback; the loader
reads the bytes that were checked even if the name is replaced meanwhile; and `tempo build`
fails when it leaves a slot serve cannot use. No compiling: the build and the loader are
stand-ins (test_built_artefacts_compile.py builds a real package)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from controller import cli  # noqa: E402
from controller.inference import artefact_identity as ai  # noqa: E402
from controller.inference import built_artefacts as ba  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402

NOBODY = 65534
INPUTS = (torch.zeros(1, 4),)
GOOD = b"the package tempo build wrote"

needs_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class StandIns:
    """The build and the package loader replaced: what was built, and the bytes each load read
    through the path it was handed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.built: list[str] = []
        self.loaded: list[bytes] = []
        self.before_load: Any = None
        built = self.built

        def build(owner, step, inputs, module, here, package, manifest, config):  # type: ignore[no-untyped-def]
            built.append(package.name)
            tmp = package.with_name(".tmp-build")
            tmp.write_bytes(b"rebuilt package")
            os.replace(tmp, package)  # as the real build: the name replaced, not written through
            owner._save_manifest(manifest, here, route="aoti", sha256=ai.file_sha256(package))
            return lambda *x: (step(*x),)

        monkeypatch.setattr(ba.BuiltArtefacts, "_build", build)
        monkeypatch.setattr(ba, "_load_package", self._load)

    def _load(self, package: Path, step: Any) -> Any:
        if self.before_load is not None:
            self.before_load()
        self.loaded.append(package.read_bytes())
        return lambda *x: (step(*x),)


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> StandIns:
    return StandIns(monkeypatch)


def write_slot(folder: Path) -> tuple[Path, Path]:
    """A valid slot for Small in `folder` (private): (package, manifest)."""
    config = RunnerConfig(artefacts_dir=folder)
    here = ai.identity(Small(), None, INPUTS, config)
    folder.mkdir(mode=0o700, exist_ok=True)
    package, manifest = ba.BuiltArtefacts(folder).paths(here["slot"])
    package.write_bytes(GOOD)
    record = {"identity": here, "route": "aoti", "sha256": ai.file_sha256(package)}
    manifest.write_text(json.dumps(record))
    return package, manifest


def serve_step(folder: Path) -> tuple[Any, str]:
    module = Small()
    config = RunnerConfig(artefacts_dir=folder)
    return ba.BuiltArtefacts(folder).step(module, module, None, INPUTS, config)


def refused_and_rebuilt(folder: Path, stand_ins: StandIns, *said: str) -> str:
    step, note = serve_step(folder)
    assert step is not None and stand_ins.loaded == [] and len(stand_ins.built) == 1, note
    assert "refused" in note and "\n" not in note
    for text in said:
        assert text in note, note
    return note


def test_a_valid_slot_is_loaded_from_the_checked_bytes(tmp_path: Path, stand_ins: StandIns) -> None:
    write_slot(tmp_path / "built")
    step, note = serve_step(tmp_path / "built")
    assert step is not None and stand_ins.built == [] and stand_ins.loaded == [GOOD], note


@needs_root
@pytest.mark.parametrize("which", ["package", "manifest"])
def test_a_file_owned_by_another_user_is_refused(
    tmp_path: Path, stand_ins: StandIns, which: str
) -> None:
    package, manifest = write_slot(tmp_path / "built")
    os.chown(package if which == "package" else manifest, NOBODY, NOBODY)
    refused_and_rebuilt(tmp_path / "built", stand_ins, "belongs to another user (uid 65534)")


@pytest.mark.parametrize("which", ["package", "manifest"])
@pytest.mark.parametrize("mode", [0o666, 0o620], ids=["0666", "0620"])
def test_a_file_others_may_write_is_refused(
    tmp_path: Path, stand_ins: StandIns, which: str, mode: int
) -> None:
    package, manifest = write_slot(tmp_path / "built")
    os.chmod(package if which == "package" else manifest, mode)
    refused_and_rebuilt(tmp_path / "built", stand_ins, f"writable by other users (mode {mode:04o})")


@pytest.mark.parametrize("which", ["package", "manifest"])
def test_a_symbolic_link_is_refused_not_followed(
    tmp_path: Path, stand_ins: StandIns, which: str
) -> None:
    # Even a link to a file of this user: what is loaded is what tempo build wrote there.
    package, manifest = write_slot(tmp_path / "built")
    link = package if which == "package" else manifest
    elsewhere = tmp_path / f"elsewhere-{link.name}"
    os.replace(link, elsewhere)
    link.symlink_to(elsewhere)
    refused_and_rebuilt(tmp_path / "built", stand_ins, "is a symbolic link")
    assert not link.is_symlink()  # the rebuild replaced the link, and left its target alone
    assert elsewhere.exists()


def test_bytes_swapped_in_after_the_check_are_not_the_ones_loaded(
    tmp_path: Path, stand_ins: StandIns
) -> None:
    # Between the checksum and the load, a writer replaces the package's name with its own
    # file: the loader still reads the checked bytes (main's code loaded by name).
    package, _ = write_slot(tmp_path / "built")
    hostile = tmp_path / "built" / "hostile.pt2"
    hostile.write_bytes(b"someone else's code")
    stand_ins.before_load = lambda: os.replace(hostile, package)
    step, note = serve_step(tmp_path / "built")
    assert step is not None and stand_ins.loaded == [GOOD], note


def test_a_manifest_nested_100000_deep_is_refused_and_rebuilt(
    tmp_path: Path, stand_ins: StandIns
) -> None:
    # main's code let json's RecursionError out: the compiled tier dropped at every start.
    _, manifest = write_slot(tmp_path / "built")
    manifest.write_text("[" * 100_000 + "]" * 100_000)
    refused_and_rebuilt(tmp_path / "built", stand_ins, "nests more than 64 levels")
    step, note = serve_step(tmp_path / "built")  # the rebuilt slot is used at the next start
    assert step is not None and stand_ins.loaded == [b"rebuilt package"], note


@pytest.mark.parametrize("which", ["package", "manifest"])
def test_a_pipe_is_refused_without_waiting_for_a_writer(
    tmp_path: Path, stand_ins: StandIns, which: str
) -> None:
    package, manifest = write_slot(tmp_path / "built")
    fifo = package if which == "package" else manifest
    fifo.unlink()
    os.mkfifo(fifo, 0o600)
    answered: list[str] = []
    serving = threading.Thread(target=lambda: answered.append(serve_step(fifo.parent)[1]))
    serving.start()
    serving.join(60)  # a watchdog for main's code, which waited on the pipe for ever
    if serving.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # unblock the reader, then fail
        serving.join()
        pytest.fail(f"serve waited on the {which} pipe for a writer")
    assert len(answered) == 1 and "a pipe, not a regular file" in answered[0], answered
    assert stand_ins.loaded == [] and len(stand_ins.built) == 1


def test_tempo_build_fails_when_it_leaves_a_slot_serve_cannot_use(
    tmp_path: Path,
    stand_ins: StandIns,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A directory where the manifest goes: refused, and the rebuilt manifest cannot replace it,
    # so serve would refuse and rebuild at every start; main's build exited 0.
    from controller.inference import build

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    folder = checkpoint / "tempo_build"
    _, manifest = write_slot(folder)
    manifest.unlink()
    manifest.mkdir()

    class Started:
        tier, ready_tiers = "compiled", ["compiled", "eager_fp32"]

    def build_policy(policy, robot, runner, progress=None, batch_sizes=(1,)):  # type: ignore[no-untyped-def]
        assert serve_step(runner.artefacts_dir)[0] is not None
        return Started()

    monkeypatch.setattr(build, "build_policy", build_policy)
    monkeypatch.setattr(build, "planner_runner", lambda policy: policy)
    settings = ["--set", "policy.device=cpu", "--set", "runner.top_tier=compiled"]
    code = cli.main(["build", str(checkpoint), *settings])
    err = capsys.readouterr().err
    assert code == 2 and stand_ins.built == [manifest.with_suffix(".pt2").name], err
    said = err.strip().splitlines()[-1]  # after the log's warnings, the command's sentence
    assert "Traceback" not in err and said.startswith("tempo: "), err
    assert str(manifest) in said and "cannot be used by serve" in said, said
    assert "a directory, not a regular file" in said, said


@pytest.fixture
def megacache_loads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What torch is asked to load as a mega-cache (pickled compiler artifacts)."""
    loads: list[bytes] = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", loads.append)
    # activate() points inductor at the cache process-wide; monkeypatch restores it after.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
    monkeypatch.setenv("TRITON_CACHE_DIR", os.environ.get("TRITON_CACHE_DIR", ""))
    return loads


def _hostile_megacache(cache: Any, how: str) -> None:
    cache.directory.mkdir(mode=0o700)
    if how == "link":
        elsewhere = cache.directory.parent / "elsewhere.bin"
        elsewhere.write_bytes(b"artifacts")
        cache.file.symlink_to(elsewhere)
    elif how == "pipe":
        os.mkfifo(cache.file, 0o600)
    else:
        cache.file.write_bytes(b"artifacts")
        if how == "nobody's":
            os.chown(cache.file, NOBODY, NOBODY)
        else:
            os.chmod(cache.file, 0o666)


@pytest.mark.parametrize(
    ("how", "said"),
    [
        pytest.param("nobody's", "belongs to another user", marks=needs_root),
        ("writable by others", "writable by other users (mode 0666)"),
        ("link", "is a symbolic link"),
        ("pipe", "a pipe, not a regular file"),
    ],
)
def test_a_megacache_file_that_is_not_the_daemons_own_is_never_loaded(
    tmp_path: Path, megacache_loads: list[bytes], how: str, said: str
) -> None:
    from controller.inference.compile_cache import CompileCache

    cache = CompileCache(tmp_path / "cache", "model")
    _hostile_megacache(cache, how)
    activating = threading.Thread(target=cache.activate)
    activating.start()
    activating.join(60)  # a watchdog for main's code, which waited on the pipe for ever
    if activating.is_alive():
        os.close(os.open(cache.file, os.O_WRONLY | os.O_NONBLOCK))
        activating.join()
        pytest.fail("the compile cache waited on the pipe for a writer")
    assert megacache_loads == [] and cache.outcome.startswith("cold"), cache.outcome
    assert said in cache.outcome and "\n" not in cache.outcome


def test_a_cache_directory_others_may_write_is_not_used(
    tmp_path: Path, megacache_loads: list[bytes]
) -> None:
    from controller.inference.compile_cache import CompileCache

    cache = CompileCache(tmp_path / "cache", "model")
    cache.directory.mkdir(mode=0o700)
    cache.file.write_bytes(b"artifacts")
    os.chmod(cache.directory, 0o777)
    cache.activate()
    assert megacache_loads == [] and os.environ["TORCHINDUCTOR_CACHE_DIR"] != str(
        cache.directory / "inductor"
    )
    assert cache.outcome.startswith("refused") and "writable by other users" in cache.outcome
    cache.save()  # nothing written there either
    assert [p.name for p in cache.directory.iterdir()] == [cache.file.name]
