"""What `tempo bench` (controller.tools.bench_policy) makes of its measurements: the table,
the verdicts against the targets (BENCHMARKS: ACT at ALOHA shapes on an NVIDIA H200) and
whether they apply to this run, and the latency plot (--plot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TARGETS = {"median_ms": 1.2, "p99_ms": 1.5, "speedup": 10.0, "parity": 1e-2, "warm_s": 15.0}
TARGET_GPU = "H200"  # the targets hold for ACT at ALOHA shapes on this GPU only


def print_table(report: dict[str, Any]) -> None:
    print(f"\npolicy: {report['policy']}  ({report['parameters_m']:.1f} M parameters)")
    print(f"device: {report['device']}   channels_last: {report['channels_last']}")
    cold, warm = report["cold_start"], report.get("warm_start") or {}
    line = f"start: cold {cold['ready_s']:.1f} s to ready (runner.start {cold['start_s']:.1f} s)"
    if warm.get("ok"):
        line += f"; warm restart {warm['ready_s']:.1f} s (runner.start {warm['start_s']:.1f} s)"
    print(line)
    for name, start in (("cold", cold), ("warm", warm)):
        if start.get("start_phases"):
            phases = ", ".join(f"{k} {v:.1f} s" for k, v in start["start_phases"].items())
            print(f"  runner.start {name}: {phases}")
    header = f"{'tier':<11}{'prec':<6}{'step p50':>12}{'step p99':>12}{'model p50':>12}"
    header += f"{'model p99':>12}{'x fp32':>8}{'x fp32 mdl':>11}{'parity':>10}"
    print(header)
    print("-" * len(header))
    for name, r in report["tiers"].items():
        s, d = r["step"], r["device"]
        print(
            f"{name:<11}{r['precision']:<6}{s['median_ms']:>10.3f}ms{s['p99_ms']:>10.3f}ms"
            f"{d['median_ms']:>10.3f}ms{d['p99_ms']:>10.3f}ms"
            f"{s['speedup_vs_eager_fp32']:>7.1f}x{d['speedup_vs_eager_fp32']:>10.1f}x"
            f"{r['parity_error']:>10.1e}"
        )
    for name, r in report.get("ab_channels_last", {}).get("tiers", {}).items():
        print(
            f"  (channels_last={report['ab_channels_last']['channels_last']}) {name}: step "
            f"{r['step']['median_ms']:.3f} ms, model {r['device']['median_ms']:.3f} ms"
        )
    if not report["targets"]:
        print(f"targets: not compared ({report['targets_skipped']})")
        return
    print(f"targets (serving tier; set for ACT at ALOHA shapes on an NVIDIA {TARGET_GPU}):")
    for key, verdict in report["targets"].items():
        print(f"  {key:<34} {verdict}")


def targets_apply(report: dict[str, Any], act_aloha: bool) -> str | None:
    """None when this run is the one the targets are set for (`act_aloha`: the built-in ACT at
    ALOHA shapes, no checkpoint); else why it is not."""
    gpu = report.get("gpu") or "no GPU"
    if TARGET_GPU not in gpu or not act_aloha:
        return (
            f"they are set for ACT at ALOHA shapes on an NVIDIA {TARGET_GPU}; this run is "
            f"{report['policy']} on {gpu}"
        )
    return None


def verdicts(report: dict[str, Any]) -> dict[str, str]:
    tiers = report["tiers"]
    serving = tiers[report["serving_tier"]]
    warm = (report.get("warm_start") or {}).get("ready_s")

    def check(ok: bool, value: str) -> str:
        return f"{'PASS' if ok else 'FAIL'} ({value})"

    t = TARGETS
    step, model = serving["step"], serving["device"]
    out = {
        f"step median <= {t['median_ms']} ms": check(
            step["median_ms"] <= t["median_ms"], f"{step['median_ms']:.3f} ms"
        ),
        f"step p99 <= {t['p99_ms']} ms": check(
            step["p99_ms"] <= t["p99_ms"], f"{step['p99_ms']:.3f} ms"
        ),
        f"model median <= {t['median_ms']} ms": check(
            model["median_ms"] <= t["median_ms"], f"{model['median_ms']:.3f} ms"
        ),
        f"speed-up >= {t['speedup']}x": check(
            (step["speedup_vs_eager_fp32"] or 0) >= t["speedup"],
            f"{step['speedup_vs_eager_fp32']:.1f}x",
        ),
        f"parity <= {t['parity']}": check(
            serving["parity_error"] <= t["parity"], f"{serving['parity_error']:.1e}"
        ),
    }
    if warm is not None:
        out[f"warm restart <= {t['warm_s']} s"] = check(warm <= t["warm_s"], f"{warm:.1f} s")
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = list(report["tiers"])
    samples = [report["tiers"][n]["step_samples_ms"] for n in names]
    ax.boxplot(samples, vert=False, showfliers=True, whis=(1, 99))
    ax.set_yticks(range(1, len(names) + 1), names)
    ax.set_xscale("log")
    ax.set_xlabel("predict_chunk time, ms (log scale; whiskers p1-p99)")
    ax.axvline(TARGETS["median_ms"], color="tab:green", linestyle="--", label="1.2 ms target")
    ax.set_title(f"{report['policy']} on {report['device']}", fontsize=9)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
