"""Artefacts built ahead of time (`tempo build`): a foreign or corrupt one is refused with one
line and rebuilt, never loaded; a model that cannot be exported takes the compile-cache route;
serve finds the folder beside the checkpoint, else in the compile cache. No compiling here: the
build is replaced by a stand-in (test_built_artefacts_compile.py builds a real package)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from controller import cli  # noqa: E402
from controller.inference import artefact_folders as af  # noqa: E402
from controller.inference import artefact_identity as ai  # noqa: E402
from controller.inference import built_artefacts as ba  # noqa: E402
from controller.policy_sections import PolicyConfig  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.model_hooks import ServedModule  # noqa: E402


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


INPUTS = (torch.zeros(1, 4),)


def fresh_build(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """Replace the (slow) build and the package loader with stand-ins recording their calls."""
    built: list[str] = []
    loaded: list[str] = []

    def build(self, step, inputs, module, here, package, manifest, config):  # type: ignore[no-untyped-def]
        built.append(package.name)
        package.write_bytes(b"new package")
        digest = ai.file_sha256(package)
        self._save_manifest(manifest, here, route="aoti", sha256=digest)
        return lambda *x: (step(*x),)

    def load(package: Path, step: Any) -> Any:
        # The loader is handed the checked descriptor's /proc/self/fd path: name its file.
        loaded.append(Path(os.readlink(package)).name)
        return lambda *x: (step(*x),)

    monkeypatch.setattr(ba.BuiltArtefacts, "_build", build)
    monkeypatch.setattr(ba, "_load_package", load)
    return built, loaded


def write_slot(folder: Path, config: RunnerConfig, change: dict[str, Any] | None = None) -> Path:
    """A built slot for Small, its manifest's identity changed by `change`; the package path."""
    module = Small()
    here = ai.identity(module, None, INPUTS, config)
    folder.mkdir(mode=0o700, exist_ok=True)
    package, manifest = ba.BuiltArtefacts(folder).paths(here["slot"])
    package.write_bytes(b"old package")
    record = {"identity": here | (change or {}), "route": "aoti"}
    record["sha256"] = ai.file_sha256(package)
    manifest.write_text(json.dumps(record))
    return package


def serve_step(folder: Path, config: RunnerConfig) -> tuple[Any, str]:
    module = Small()
    return ba.BuiltArtefacts(folder).step(module, module, None, INPUTS, config)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"device": "NVIDIA H100 80GB HBM3"}, "built for device NVIDIA H100 80GB HBM3"),
        ({"torch": "2.11.0+cu128"}, f"built for torch 2.11.0+cu128, this is {torch.__version__}"),
        ({"settings": {"precision": "bf16"}}, "built for runner settings"),
        ({"tempo": "0.0.1"}, "built for Tempo 0.0.1"),
        ({"code": "0" * 20}, "built for model code"),
    ],
)
def test_a_foreign_artefact_is_refused_and_rebuilt_never_loaded(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    change: dict[str, Any],
    said: str,
) -> None:
    built, loaded = fresh_build(monkeypatch)
    config = RunnerConfig(artefacts_dir=tmp_path / "built")
    package = write_slot(tmp_path / "built", config, change)
    step, note = serve_step(tmp_path / "built", config)
    assert step is not None and loaded == [] and built == [package.name]
    assert said in note and "refused" in note and "built " in note
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and "\n" not in refusals[0]
    # The rebuilt slot is this process's: the next start loads it.
    step, note = serve_step(tmp_path / "built", config)
    assert step is not None and loaded == [package.name] and note.startswith("loaded")


def test_a_valid_artefact_is_loaded_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built, loaded = fresh_build(monkeypatch)
    config = RunnerConfig(artefacts_dir=tmp_path / "built")
    package = write_slot(tmp_path / "built", config)
    step, note = serve_step(tmp_path / "built", config)
    assert step is not None and built == [] and loaded == [package.name] and "loaded" in note


@pytest.mark.parametrize("damage", ["package bytes", "manifest", "package gone"])
def test_a_corrupt_artefact_is_refused_in_one_sentence_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    built, loaded = fresh_build(monkeypatch)
    config = RunnerConfig(artefacts_dir=tmp_path / "built")
    package = write_slot(tmp_path / "built", config)
    if damage == "package bytes":
        package.write_bytes(b"old packagf")
    elif damage == "manifest":
        package.with_suffix(".json").write_text('{"identity": ')
    else:
        package.unlink()
    step, note = serve_step(tmp_path / "built", config)
    assert step is not None and loaded == [] and built == [package.name]
    assert "refused" in note and "\n" not in note
    expected = {
        "package bytes": "does not match the checksum",
        "manifest": "manifest is unreadable",
        "package gone": "package is missing",
    }[damage]
    assert expected in note


def test_an_unloadable_package_is_refused() -> None:
    """A package whose bytes match its manifest but that torch cannot open (a truncated
    archive): refused in one clause, not a crash."""
    with pytest.raises(ai.ArtefactRefused, match="could not be loaded"):
        ba._load_package(Path(os.devnull), Small())


def test_a_folder_others_may_write_is_not_loaded_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built, loaded = fresh_build(monkeypatch)
    config = RunnerConfig(artefacts_dir=tmp_path / "built")
    write_slot(tmp_path / "built", config)
    (tmp_path / "built").chmod(0o777)
    step, note = serve_step(tmp_path / "built", config)
    assert step is None and built == [] and loaded == []
    assert "writable by other users" in note


class ByRegions(ServedModule, Small):  # type: ignore[misc]
    def compile_regions(self, compile_fn: Any) -> bool:
        return True


@pytest.mark.parametrize("case", ["regions", "freezing", "export fails"])
def test_what_cannot_be_exported_takes_the_compile_cache_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    config = RunnerConfig(artefacts_dir=tmp_path, freezing=case == "freezing")
    module = ByRegions() if case == "regions" else Small()

    def export_fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("data-dependent control flow\nmore lines")

    monkeypatch.setattr(torch.export, "export", export_fails)
    step, note = ba.BuiltArtefacts(tmp_path).step(module, module, None, INPUTS, config)
    assert step is None and "compile-cache route" in note
    if case == "export fails":
        assert "data-dependent control flow" in note and "more lines" not in note
        # Recorded: the next start does not try to export it again.
        monkeypatch.setattr(torch.export, "export", lambda *a, **k: pytest.fail("exported"))
        step, again = ba.BuiltArtefacts(tmp_path).step(module, module, None, INPUTS, config)
        assert step is None and "data-dependent control flow" in again


class _OnCuda:
    """An input that says it is on CUDA (this machine has no GPU; only its device is read)."""

    device = torch.device("cuda")


def test_on_cuda_auto_builds_a_package_as_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until inductor's layout optimisation was turned off for packages, CUDA took the
    compile-cache route; now a CUDA step goes to torch.export as a CPU one does."""
    module = Small()

    def export(*args: object, **kwargs: object) -> None:
        raise RuntimeError("exported for cuda")

    monkeypatch.setattr(torch.export, "export", export)
    monkeypatch.setattr(ba, "identity", lambda *a, **k: {"slot": "cuda-slot"})  # no GPU here
    config = RunnerConfig(artefacts_dir=tmp_path)  # built_artefacts: auto
    step, note = ba.BuiltArtefacts(tmp_path).step(module, module, None, (_OnCuda(),), config)  # type: ignore[arg-type]
    assert step is None and "exported for cuda" in note
    assert ba.package_options(module, config)["layout_optimization"] is False
    assert RunnerConfig(built_artefacts="aot").built_artefacts == "auto"  # the older name


def test_serve_finds_the_folder_beside_the_checkpoint_else_in_the_cache(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    policy = PolicyConfig(kind="checkpoint", path=checkpoint)
    runner = RunnerConfig(cache_dir=tmp_path / "cache")
    assert af.with_built_artefacts(runner, policy).artefacts_dir is None  # nothing built
    cache_folder = af.artefact_folders(policy, runner)[1]
    cache_folder.mkdir(parents=True)
    assert af.with_built_artefacts(runner, policy).artefacts_dir == cache_folder
    (checkpoint / "tempo_build").mkdir()
    assert af.with_built_artefacts(runner, policy).artefacts_dir == checkpoint / "tempo_build"
    off = runner.model_copy(update={"built_artefacts": "off"})
    assert af.with_built_artefacts(off, policy).artefacts_dir is None


def test_build_falls_back_to_the_cache_when_the_checkpoint_folder_is_not_writable(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "tempo_build").write_text("a file where the folder would go")  # even as root
    policy = PolicyConfig(kind="checkpoint", path=checkpoint)
    runner = RunnerConfig(cache_dir=tmp_path / "cache")
    folder = af.folder_to_build(runner, policy)
    assert folder == af.artefact_folders(policy, runner)[1] and folder.is_dir()
    assert folder.stat().st_mode & 0o077 == 0


def test_tempo_build_with_nothing_to_compile_says_so_in_one_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["build", "--set", "policy.device=cpu", "--set", "runner.top_tier=eager_fp32"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "nothing to build" in err and "\n" not in err


def test_with_built_artefacts_the_mega_cache_is_loaded_only_if_torch_compile_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a mega-cache takes seconds that a start from built artefacts does not need;
    and a start that compiled nothing must neither overwrite it nor mark inductor warm."""
    from controller.inference import compile_cache

    loads: list[bytes] = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", loads.append)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"empty", None))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cache = compile_cache.CompileCache(tmp_path, "key")
    cache.file.parent.mkdir(parents=True, exist_ok=True)
    cache.file.write_bytes(b"saved artifacts")
    cache.activate(defer=True)
    assert loads == [] and cache.outcome == compile_cache.DEFERRED
    cache.save()
    assert cache.file.read_bytes() == b"saved artifacts" and not cache.warm_marker.exists()
    compile_cache.load_deferred_megacaches()  # a tier fell back to torch.compile
    compile_cache.load_deferred_megacaches()
    assert loads == [b"saved artifacts"] and cache.outcome == "loaded"


def test_tempo_build_starts_the_policy_with_the_folder_beside_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tempo build CHECKPOINT` is a start of the policy as serve starts it (its batch sizes
    too), with the artefacts folder set to the checkpoint's tempo_build/, made private."""
    from controller.inference import build

    started: list[tuple[Any, ...]] = []

    class Started:
        tier, ready_tiers = "compiled", ["compiled", "eager_fp32"]

    def build_policy(policy, robot, runner, progress=None, batch_sizes=(1,)):  # type: ignore[no-untyped-def]
        started.append((policy.path, runner.artefacts_dir, tuple(batch_sizes)))
        return Started()

    monkeypatch.setattr(build, "build_policy", build_policy)
    monkeypatch.setattr(build, "planner_runner", lambda policy: policy)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    settings = ["--set", "policy.device=cpu", "--set", "runner.top_tier=compiled"]
    settings += ["--set", "execution.batch_sizes=[1,2]"]
    code = cli.main(["build", str(checkpoint), *settings])
    assert code == 0, capsys.readouterr().err
    assert started == [(checkpoint, checkpoint / "tempo_build", (1, 2))]
    assert (checkpoint / "tempo_build").stat().st_mode & 0o077 == 0
    assert "serving tier compiled" in capsys.readouterr().out


def test_tempo_build_picks_the_named_policy_of_several() -> None:
    from controller.config import load_config
    from controller.errors import ConfigError
    from controller.tools.build_cli import chosen_policy

    two = load_config(
        None,
        [
            "policies=[{name: arm, policy: {kind: reach}, runner: {top_tier: compiled}}, "
            "{name: wrist, policy: {kind: reach}}]"
        ],
    )
    assert chosen_policy(two, "arm").runner.top_tier == "compiled"  # the arm's own runner
    assert chosen_policy(two, "wrist").runner.top_tier == "auto"
    with pytest.raises(ConfigError, match="several policies .'arm', 'wrist'.; name one"):
        chosen_policy(two, None)
    with pytest.raises(ConfigError, match="no policy named 'grip'"):
        chosen_policy(two, "grip")
    one = load_config(None, [])
    assert chosen_policy(one, None) is one


def test_a_build_that_failed_for_want_of_disk_or_memory_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = RunnerConfig(artefacts_dir=tmp_path)
    module = Small()

    def no_space(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch.export, "export", no_space)
    step, note = ba.BuiltArtefacts(tmp_path).step(module, module, None, INPUTS, config)
    assert step is None and "No space left on device" in note
    tried = []
    monkeypatch.setattr(torch.export, "export", lambda *a, **k: tried.append(1) or no_space())
    ba.BuiltArtefacts(tmp_path).step(module, module, None, INPUTS, config)
    assert tried  # not recorded as the model's route: the next start tries again
