"""Does an AOTInductor package of ACT's step compute what the eager step does, and how long does
a fresh process take to load it? The diagnostic that found why `tempo build`'s ACT-ALOHA packages
missed parity on an H200 (inductor's layout optimisation: 0.162 off with it, 9.8e-4 without,
variant `layout-opt`) and took 49 s to load (44 s of it aoti_load_package describing the
machine, which the runner skips).

    python -m scripts.parity.check_aoti_package --policy act-aloha --device cuda --work DIR
    python -m scripts.parity.check_aoti_package --policy act-demo --device cpu --variants runner

Each build variant compiles one package of the step: the half tier's (FP16 weight copy under
autocast, channels-last on CUDA, as the runner builds it) with the runner's package settings or
one inductor setting changed, or the plain FP32 step (`fp32`: no autocast). Then:
- export: the exported program against the eager step (does torch.export keep the step?);
- decomp: the program decomposed as the package compiles it, run eagerly;
- in process, once per way of loading it: as the runner does (the C++ loader made directly,
  one thread, the model's own tensors handed over), and through aoti_load_package with the
  container's thread pool, or with the tensors copied in;
- fresh process (the variants named by --fresh): a new Python rebuilds the model from the same
  seed, loads the package as the runner does (the C++ loader made directly, the weights handed
  over) and compares with the eager outputs saved beside it. Its load and first call are timed,
  any process it starts is named, and a Python stack is printed to DIR/VARIANT.child.log if
  the load is still going after 20 s.
A difference well above the half tier's (about 1e-3 against FP32) is a wrong package. Prints a
table; --json keeps the figures.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from controller.inference.built_artefacts import (
    PackageStep,
    Step,
    _load_package,
    _open_package,
    package_options,
)
from controller.inference.half_weights import half_weight_copy
from controller.inference.tiers import _Step
from controller.runner_config import RunnerConfig
from policies.model_hooks import hooks_of
from policies.tensor_policy import example_inputs

# name -> inductor settings changed from the runner's package settings
VARIANTS: dict[str, dict[str, Any]] = {
    "runner": {},
    "constants-inside": {"aot_inductor.package_constants_in_so": True},
    "no-padding": {"comprehensive_padding": False, "shape_padding": False},
    "no-fusion": {"max_fusion_size": 1},
    "layout-opt": {"layout_optimization": True},  # as packages were built before
    "fp32": {},  # the FP32 step, no autocast
}
CONSTANTS_INSIDE = ("constants-inside",)
# name -> (run_single_threaded, user_managed weights) through aoti_load_package; "runner": as
# the runner loads it (AOTInductor's C++ loader made directly, one thread, its tensors used)
LOADS: dict[str, tuple[bool, bool]] = {
    "runner": (True, True),
    "threaded": (False, True),
    "copied": (True, False),
}


def _model(
    policy: str, device: torch.device, variant: str
) -> tuple[_Step, tuple[torch.Tensor, ...]]:
    """(The variant's step, example inputs), as the runner makes them."""
    from policies.act.demo import make_aloha_policy, make_demo_policy

    made = make_aloha_policy(0) if policy == "act-aloha" else make_demo_policy()
    module = made.module.to(device).eval()
    if device.type == "cuda":  # the runner's channels_last: auto
        module = hooks_of(module).use_channels_last()
    if variant == "fp32":
        step = _Step(module, None, device.type)
    else:
        step = _Step(half_weight_copy(module, torch.float16), torch.float16, device.type)
    return step, example_inputs(made.spec, device=device)


def _constants(step: torch.nn.Module) -> dict[str, torch.Tensor]:
    named = [
        *step.named_parameters(remove_duplicate=False),
        *step.named_buffers(remove_duplicate=False),
    ]
    return {name: tensor.detach() for name, tensor in named}


def _load(package: Path, step: torch.nn.Module, variant: str, how: str) -> Any:
    """The package loaded `how` (LOADS); "runner" as the runner loads it (_load_package)."""
    from torch._inductor import aoti_load_package

    if how == "runner":
        return PackageStep(_open_package(package)) if variant in CONSTANTS_INSIDE else (
            _load_package(package, step))  # fmt: skip
    single, user_managed = LOADS[how]
    loaded = aoti_load_package(str(package), run_single_threaded=single)
    if variant not in CONSTANTS_INSIDE:
        mine = _constants(step)
        wanted = loaded.get_constant_fqns()
        loaded.load_constants(
            {n: mine[n] for n in wanted}, check_full_update=True, user_managed=user_managed
        )
    return loaded


def _difference(got: tuple[torch.Tensor, ...], want: list[torch.Tensor]) -> float:
    return max(float((g.float().cpu() - w).abs().max()) for g, w in zip(got, want, strict=True))


def _contents(package: Path) -> str:
    """What the archive holds: file count and MiB by kind (.so, .cubin, .cpp, weights...)."""
    kinds: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    with zipfile.ZipFile(package) as archive:
        for info in archive.infolist():
            kind = Path(info.filename).suffix or Path(info.filename).name
            kinds[kind] += 1
            sizes[kind] += info.file_size
    return ", ".join(f"{k} {kinds[k]}x{sizes[k] / 2**20:.1f}M" for k in sorted(kinds))


def build(args: argparse.Namespace, name: str) -> dict[str, Any]:
    from torch._inductor import aoti_compile_and_package

    device = torch.device(args.device)
    step, inputs = _model(args.policy, device, name)
    fp32_step, _ = _model(args.policy, device, "fp32")
    with torch.no_grad():
        eager = [o.cpu() for o in step(*inputs)]
        fp32 = [o.cpu() for o in fp32_step(*inputs)]
        exported = torch.export.export(step, inputs, strict=False)
        export_difference = _difference(exported.module()(*inputs), eager)
        decomposed = exported.run_decompositions()  # as the package compiles it
        decomposed_difference = _difference(decomposed.module()(*inputs), eager)
        options = {**package_options(step.module, RunnerConfig()), **VARIANTS[name]}
        package = args.work / f"{name}.pt2"
        started = time.perf_counter()
        aoti_compile_and_package(exported, package_path=str(package), inductor_configs=options)
        build_s = time.perf_counter() - started
        hows = ["runner"] if name in CONSTANTS_INSIDE else list(LOADS)
        in_process = {
            how: _difference(_load(package, step, name, how)(*inputs), eager) for how in hows
        }
    torch.save({"eager": eager}, args.work / f"{name}.eager.pt")
    return {"variant": name, "half_vs_fp32": _difference(tuple(eager), fp32),
            "export": export_difference, "decomposed": decomposed_difference,
            "build_s": build_s, "in_process": in_process,
            "contents": _contents(package)}  # fmt: skip


def _watch_children(seen: set[str], stop: threading.Event) -> None:
    """Names every process this one starts (a compiler at load would be one)."""
    me = str(os.getpid())
    while not stop.wait(0.2):
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if fields[1] == me:
                    seen.add(
                        (stat.parent / "cmdline")
                        .read_text()
                        .replace("\0", " ")
                        .replace("\n", " ")[:120]
                    )
            except (OSError, IndexError):
                continue


def fresh(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """The child's side: load the package the parent built, compare with its saved outputs."""
    device = torch.device(args.device)
    step, inputs = _model(args.policy, device, name)
    eager = torch.load(args.work / f"{name}.eager.pt")["eager"]
    seen: set[str] = set()
    stop = threading.Event()
    threading.Thread(target=_watch_children, args=(seen, stop), daemon=True).start()
    faulthandler.dump_traceback_later(20, exit=False)
    times = {"start": time.perf_counter()}
    package = args.work / f"{name}.pt2"
    loaded: Step
    if name in CONSTANTS_INSIDE:
        loaded = PackageStep(_open_package(package))
    else:
        loaded = _load_package(package, step)  # as the runner loads it: its weights handed over
    times["load"] = time.perf_counter()
    with torch.no_grad():
        got = loaded(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
    times["first call"] = time.perf_counter()
    faulthandler.cancel_dump_traceback_later()
    stop.set()
    parts = list(times)
    took = {b: round(times[b] - times[a], 2) for a, b in zip(parts, parts[1:], strict=False)}
    return {"fresh_load_s": times["load"] - times["start"], "fresh_parts_s": took,
            "fresh_started": sorted(seen), "fresh_process": _difference(got, eager)}  # fmt: skip


def _run_child(args: argparse.Namespace, name: str) -> dict[str, Any]:
    log = args.work / f"{name}.child.log"
    with log.open("w") as err:
        child = subprocess.run(
            [sys.executable, "-m", __spec__.name, "--policy", args.policy, "--device", args.device,
             "--work", str(args.work), "--fresh-child", name],
            stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
    lines = child.stdout.strip().splitlines()
    if child.returncode == 0 and lines:
        return dict(json.loads(lines[-1]))
    tail = log.read_text().strip()[-200:]
    return {"fresh_error": f"exit {child.returncode}: {tail}"}


def _print(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    print(f"ACT step package ({args.policy}, {args.device}, torch {torch.__version__}); "
          "differences: max |package - eager step|")  # fmt: skip
    print(f"{'variant':18s}{'half-fp32':>11s}{'export':>10s}{'decomp':>10s}"
          + "".join(f"{'in ' + how:>12s}" for how in LOADS)
          + f"{'fresh':>10s}{'build s':>9s}{'load s':>8s}")  # fmt: skip
    for r in rows:
        cells = "".join(
            f"{r['in_process'][how]:12.2e}" if how in r["in_process"] else f"{'-':>12s}"
            for how in LOADS
        )
        print(f"{r['variant']:18s}{r['half_vs_fp32']:11.2e}{r['export']:10.2e}"
              f"{r['decomposed']:10.2e}{cells}"
              f"{r.get('fresh_process', float('nan')):10.2e}{r['build_s']:9.1f}"
              f"{r.get('fresh_load_s', float('nan')):8.1f}")  # fmt: skip
        print(f"  package: {r['contents']}")
        if "fresh_parts_s" in r:
            print(f"  fresh load parts (s): {r['fresh_parts_s']}; processes started: "
                  f"{r['fresh_started'] or 'none'}")  # fmt: skip
        if "fresh_error" in r:
            print(f"  fresh process failed: {r['fresh_error']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=["act-aloha", "act-demo"], default="act-aloha")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--fresh", default="runner", help="variants also loaded by a fresh process")
    parser.add_argument("--work", type=Path, default=Path("aoti-check"), help="packages go here")
    parser.add_argument("--json", dest="json_out", type=Path)
    parser.add_argument("--fresh-child", help=argparse.SUPPRESS)  # the child's variant
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.fresh_child:
        print(json.dumps(fresh(args, args.fresh_child)))
        return 0
    rows = []
    for name in args.variants.split(","):
        if name not in VARIANTS:
            raise SystemExit(
                f"check_aoti_package: no variant {name!r} (there are {', '.join(VARIANTS)})"
            )
        row = build(args, name)
        if name in args.fresh.split(","):
            row.update(_run_child(args, name))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    _print(args, rows)
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
