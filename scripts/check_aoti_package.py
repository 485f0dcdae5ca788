"""Does an AOTInductor package of ACT's step compute what the eager step does? A diagnostic for
`tempo build` (runner.built_artefacts: aot), which on CUDA made ACT-ALOHA packages that miss
parity, built from FP16 or FP32 weights alike.

    python scripts/check_aoti_package.py --policy act-aloha --device cuda --work DIR
    python scripts/check_aoti_package.py --policy act-demo --device cpu --variants runner

For each variant (the runner's package settings, and each with one inductor setting changed),
the step of the half tier (FP16 weight copy under autocast, channels-last on CUDA, as the
runner builds it) is exported and compiled into a package, then:
- export: the exported program against the eager step (does torch.export keep the step?);
- in process: the package loaded where it was built, the model's tensors handed over;
- fresh process: a new Python rebuilds the model from the same seed, loads the package and
  compares with the eager outputs saved beside it; its load is timed (42-48 s on an H200).
A difference well above the half tier's (about 1e-3 against FP32) is a wrong package. Prints a
table; --json keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from controller.inference.built_artefacts import package_options
from controller.inference.half_weights import half_weight_copy
from controller.inference.tiers import _Step
from controller.runner_config import RunnerConfig
from policies.model_hooks import hooks_of
from policies.tensor_policy import example_inputs

# name -> inductor settings changed from the runner's package settings
VARIANTS: dict[str, dict[str, Any]] = {
    "runner": {},
    "no-padding": {"comprehensive_padding": False, "shape_padding": False},
    "constants-inside": {"aot_inductor.package_constants_in_so": True},
    "no-fusion": {"max_fusion_size": 1},
}


def _model(
    policy: str, device: torch.device
) -> tuple[torch.nn.Module, _Step, tuple[torch.Tensor, ...]]:
    """(The FP32 module, the half tier's step, example inputs), as the runner makes them."""
    from policies.act.demo import make_aloha_policy, make_demo_policy

    made = make_aloha_policy(0) if policy == "act-aloha" else make_demo_policy()
    module = made.module.to(device).eval()
    if device.type == "cuda":  # the runner's channels_last: auto
        module = hooks_of(module).use_channels_last()
    step = _Step(half_weight_copy(module, torch.float16), torch.float16, device.type)
    return module, step, example_inputs(made.spec, device=device)


def _constants(step: torch.nn.Module) -> dict[str, torch.Tensor]:
    named = [
        *step.named_parameters(remove_duplicate=False),
        *step.named_buffers(remove_duplicate=False),
    ]
    return {name: tensor.detach() for name, tensor in named}


def _load(package: Path, step: torch.nn.Module, constants_inside: bool) -> Any:
    from torch._inductor import aoti_load_package

    loaded = aoti_load_package(str(package), run_single_threaded=True)
    if not constants_inside:
        mine = _constants(step)
        wanted = loaded.get_constant_fqns()
        loaded.load_constants(
            {n: mine[n] for n in wanted}, check_full_update=True, user_managed=True
        )
    return loaded


def _difference(got: tuple[torch.Tensor, ...], want: list[torch.Tensor]) -> float:
    return max(float((g.float().cpu() - w).abs().max()) for g, w in zip(got, want, strict=True))


def build(args: argparse.Namespace, name: str) -> dict[str, Any]:
    from torch._inductor import aoti_compile_and_package

    device = torch.device(args.device)
    module, step, inputs = _model(args.policy, device)
    with torch.no_grad():
        eager = [o.cpu() for o in step(*inputs)]
        fp32 = [o.cpu() for o in _Step(module, None, device.type)(*inputs)]
        exported = torch.export.export(step, inputs, strict=False)
        export_difference = _difference(exported.module()(*inputs), eager)
        options = {**package_options(step.module, RunnerConfig()), **VARIANTS[name]}
        package = args.work / f"{name}.pt2"
        started = time.perf_counter()
        aoti_compile_and_package(exported, package_path=str(package), inductor_configs=options)
        build_s = time.perf_counter() - started
        loaded = _load(package, step, "constants-inside" in name)
        in_process = _difference(loaded(*inputs), eager)
    torch.save({"eager": eager}, args.work / f"{name}.eager.pt")
    return {"variant": name, "half_vs_fp32": _difference(tuple(eager), fp32),
            "export": export_difference, "build_s": build_s, "in_process": in_process}  # fmt: skip


def fresh(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """The child's side: load the package the parent built, compare with its saved outputs."""
    device = torch.device(args.device)
    _, step, inputs = _model(args.policy, device)
    eager = torch.load(args.work / f"{name}.eager.pt")["eager"]
    started = time.perf_counter()
    loaded = _load(args.work / f"{name}.pt2", step, "constants-inside" in name)
    load_s = time.perf_counter() - started
    with torch.no_grad():
        return {"fresh_load_s": load_s, "fresh_process": _difference(loaded(*inputs), eager)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=["act-aloha", "act-demo"], default="act-aloha")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--work", type=Path, default=Path("aoti-check"), help="packages go here")
    parser.add_argument("--json", dest="json_out", type=Path)
    parser.add_argument("--fresh", help=argparse.SUPPRESS)  # the child's variant
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.fresh:
        print(json.dumps(fresh(args, args.fresh)))
        return 0
    rows = []
    for name in args.variants.split(","):
        if name not in VARIANTS:
            raise SystemExit(
                f"check_aoti_package: no variant {name!r} (there are {', '.join(VARIANTS)})"
            )
        row = build(args, name)
        child = subprocess.run(
            [sys.executable, __file__, "--policy", args.policy, "--device", args.device,
             "--work", str(args.work), "--fresh", name],
            capture_output=True, text=True,
        )  # fmt: skip
        lines = child.stdout.strip().splitlines()
        if child.returncode == 0 and lines:
            row.update(json.loads(lines[-1]))
        else:
            row["fresh_error"] = f"exit {child.returncode}: {child.stderr.strip()[-200:]}"
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"ACT step package ({args.policy}, {args.device}, torch {torch.__version__}); "
          "differences: max |package - eager half step|")  # fmt: skip
    print(f"{'variant':18s}{'half-fp32':>11s}{'export':>10s}{'in proc':>10s}{'fresh':>10s}"
          f"{'build s':>9s}{'load s':>8s}")  # fmt: skip
    for r in rows:
        fresh_diff = r.get("fresh_process", float("nan"))
        print(f"{r['variant']:18s}{r['half_vs_fp32']:11.2e}{r['export']:10.2e}"
              f"{r['in_process']:10.2e}{fresh_diff:10.2e}{r['build_s']:9.1f}"
              f"{r.get('fresh_load_s', float('nan')):8.1f}")  # fmt: skip
        if "fresh_error" in r:
            print(f"  fresh process failed: {r['fresh_error']}")
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
