"""A real AOTInductor package of the tiny policy on the CPU: built on the first start, loaded on
the next without dynamo tracing, serving the module's own weights (the package embeds none)
within the parity tolerance of the eager reference. One compile (~20-40 s on a 2-core box)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from controller.inference import built_artefacts as ba  # noqa: E402
from controller.inference.artefact_identity import ArtefactRefused, file_sha256  # noqa: E402
from controller.inference.examples import random_observation  # noqa: E402
from controller.inference.parity import relative_error  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.tensor_policy import EagerPolicy  # noqa: E402
from policies.tiny import build_tiny_policy  # noqa: E402

needs_cpp = pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
    reason="AOTInductor needs a C++ compiler",
)


# A fresh Python starts the tiny policy's runner from the built folder (load, parity checks,
# serving) and takes a step, then says whether torch's compiler (dynamo) was imported on the way.
START_WITHOUT_COMPILER = """
import sys
from pathlib import Path
from controller.inference.examples import random_observation
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.tiny import build_tiny_policy
config = RunnerConfig(top_tier="compiled", serve_slower_tiers=True, cache_dir=Path(sys.argv[1]),
                      artefacts_dir=Path(sys.argv[2]), parity_observations=2, step_budget_ms=None)
runner = Runner(build_tiny_policy(seed=0), config, device="cpu")
runner.start()
runner.predict_chunk(*random_observation(runner.spec, 7))
print(runner.tier, "compiler:", "torch._dynamo" in sys.modules)
"""


def start(config: RunnerConfig, seed: int) -> Runner:
    runner = Runner(build_tiny_policy(seed=seed), config, device="cpu")
    runner.start()
    return runner


def served_matches_reference(runner: Runner, seed: int, config: RunnerConfig) -> None:
    reference = EagerPolicy(build_tiny_policy(seed=seed))
    for k in range(3):
        observation = random_observation(runner.spec, 100 + k)
        out = runner.predict_chunk(*observation)
        assert relative_error(out, reference.predict_chunk(*observation)) <= config.parity_rtol


@needs_cpp
def test_a_built_package_is_loaded_without_tracing_and_serves_the_modules_weights(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="controller.inference.built_artefacts")
    # The fresh-process load a CUDA build gets, here on the CPU: a good package passes it.
    monkeypatch.setattr(ba, "_checks_load_in_a_child", lambda device_type: True)
    config = RunnerConfig(
        top_tier="compiled",
        serve_slower_tiers=True,
        cache_dir=tmp_path / "cache",
        artefacts_dir=tmp_path / "built",
        parity_observations=2,
        step_budget_ms=None,
    )
    first = start(config, seed=0)
    assert first.tier == "compiled"
    (manifest,) = (tmp_path / "built").glob("step-*.json")
    record = json.loads(manifest.read_text())
    assert record["route"] == "aoti" and manifest.with_suffix(".pt2").exists()
    assert any("none built" in r.getMessage() for r in caplog.records)
    served_matches_reference(first, 0, config)

    # The next start loads it: no frame goes through dynamo. Other weights, same structure:
    # the package serves the module's own (it embeds none).
    caplog.clear()
    frames = torch._dynamo.utils.counters["frames"]["total"]
    second = start(config, seed=1)
    assert torch._dynamo.utils.counters["frames"]["total"] == frames
    notes = [r.getMessage() for r in caplog.records if "built artefacts" in r.getMessage()]
    assert len(notes) == 1 and "loaded" in notes[0]
    assert second.tier == "compiled"
    served_matches_reference(second, 1, config)

    # A fresh process starts from it and serves without importing torch's compiler (seconds).
    fresh = subprocess.run(
        [sys.executable, "-c", START_WITHOUT_COMPILER, str(tmp_path / "cache"),
         str(tmp_path / "built")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert fresh.stdout.split() == ["compiled", "compiler:", "False"], fresh.stderr[-2000:]

    # A truncated package whose manifest was made to match: refused, not a crash.
    package = manifest.with_suffix(".pt2")
    package.write_bytes(package.read_bytes()[: package.stat().st_size // 2])
    record["sha256"] = file_sha256(package)
    manifest.write_text(json.dumps(record))
    module = build_tiny_policy(seed=0).module
    step = ba.BuiltArtefacts(tmp_path / "built")
    with pytest.raises(ArtefactRefused, match="could not be loaded"):
        step._load(module, record["identity"], package, manifest)


@needs_cpp
def test_a_package_that_kills_its_loader_is_never_loaded_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On GPU hosts whose compiler linked libstdc++ statically AOTInductor's loader died with
    SIGSEGV on every package: a new package is loaded by a fresh process first (on CUDA; here
    on the CPU, with a loader made to die the same way), and one that fails there is recorded
    for the compile cache."""
    monkeypatch.setattr(ba, "_checks_load_in_a_child", lambda device_type: True)
    monkeypatch.setattr(ba, "LOAD_CHECK", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    caplog.set_level(logging.INFO, logger="controller.inference.built_artefacts")
    config = RunnerConfig(top_tier="compiled", serve_slower_tiers=True,
                          cache_dir=tmp_path / "cache", artefacts_dir=tmp_path / "built",
                          parity_observations=2, step_budget_ms=None)  # fmt: skip
    first = start(config, seed=0)
    assert first.tier == "compiled"  # served, by the compile cache
    (manifest,) = (tmp_path / "built").glob("step-*.json")
    record = json.loads(manifest.read_text())
    assert record["route"] == "compile cache"
    assert "the loading process was killed by signal 11" in record["reason"]
    assert "(compiled by " in record["reason"]  # the compiler: what crashed loaders on GPU hosts
    assert not list((tmp_path / "built").glob("*.pt2"))  # nothing loadable is left there
    served_matches_reference(first, 0, config)

    caplog.clear()
    start(config, seed=0)  # the next start does not build (or load) it again
    notes = [r.getMessage() for r in caplog.records if "built artefacts" in r.getMessage()]
    assert len(notes) == 1 and "takes the compile-cache route" in notes[0]
    assert "killed by signal 11" in notes[0]


def test_a_load_check_that_ran_out_of_memory_or_time_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check that could not finish (no memory, no time, no process) says nothing lasting
    about the package: the next start builds and checks again."""
    package = tmp_path / "step.pt2"
    package.write_bytes(b"")
    monkeypatch.setattr(
        ba, "LOAD_CHECK", "raise SystemExit('torch.OutOfMemoryError: CUDA out of memory')"
    )
    why, lasting = ba._load_in_a_child(package) or ("", True)
    assert "out of memory" in why and not lasting
    monkeypatch.setattr(ba, "LOAD_CHECK", "import time; time.sleep(30)")
    monkeypatch.setattr(ba, "LOAD_CHECK_TIMEOUT_S", 0.5)
    why, lasting = ba._load_in_a_child(package) or ("", True)
    assert "had not loaded" in why and not lasting
    monkeypatch.setattr(ba, "LOAD_CHECK", "raise SystemExit('RuntimeError: bad archive')")
    assert ba._load_in_a_child(package) == ("exit 1: RuntimeError: bad archive", True)
