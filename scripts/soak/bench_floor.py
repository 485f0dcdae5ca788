"""The host's own floor beside Tempo's control loop: cyclictest and the daemon, same period,
same background load, same run.

cyclictest (Debian package rt-tests) is a C thread that sleeps to absolute deadlines and
records how late it wakes: what this kernel and this load allow any program at that period.
Tempo's loop does the same in Python (sleep, then spin the last stretch) while serving a robot.
Both run under the same scheduling class (SCHED_OTHER: the hosts Tempo is measured on refuse
SCHED_FIFO), at the control period, while `--load` processes burn CPU; the daemon and a
simulated robot run through scripts/soak/soak.py, cyclictest beside them for the same seconds.

    python -m scripts.soak.bench_floor --seconds 60 --rate 200 --load 2 [--set policy.kind=...]

The goal it checks: Tempo's tick lateness p99 <= 1.5x cyclictest's p99.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scripts.soak.soak import soak

GOAL_RATIO = 1.5
HISTOGRAM_US = 20_000  # wake-ups later than 20 ms count as overflows (and as 20 ms)


def cyclictest_command(period_us: int, seconds: float) -> list[str]:
    """One thread at the control period, memory locked, a histogram per us. Priority 0 (the
    default) measures under SCHED_OTHER, as the daemon's loop runs (`--policy=other` would
    give SCHED_FIFO priority 2 in rt-tests 2.4)."""
    return [
        "cyclictest",
        "--quiet",
        "--mlockall",
        f"--interval={period_us}",
        f"--histogram={HISTOGRAM_US}",
        f"--duration={max(1, round(seconds))}",
    ]


# cyclictest first checks that it could use SCHED_FIFO (sched_setscheduler to FIFO priority 1,
# then back) and exits where that is refused, as on the GPU hosts, even when it will measure
# under SCHED_OTHER. This shim answers that one probe; every other call goes through unchanged,
# and the measuring thread stays SCHED_OTHER (priority 0).
PROBE_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
int sched_setscheduler(pid_t pid, int policy, const struct sched_param *param) {
    static int (*real)(pid_t, int, const struct sched_param *);
    if (!real) real = dlsym(RTLD_NEXT, "sched_setscheduler");
    int result = real(pid, policy, param);
    if (result != 0 && policy == SCHED_FIFO && param && param->sched_priority == 1) return 0;
    return result;
}
"""


def probe_shim(directory: str) -> str | None:
    """The shim above built with the host's C compiler (None when there is none)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    source, library = Path(directory) / "shim.c", Path(directory) / "shim.so"
    source.write_text(PROBE_SHIM)
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"],
        capture_output=True,
    )
    return str(library) if built.returncode == 0 else None


def fifo_refused() -> bool:
    """Whether cyclictest refuses to start here for want of SCHED_FIFO (see PROBE_SHIM)."""
    trial = subprocess.run(
        ["cyclictest", "--quiet", "--loops=1"], capture_output=True, text=True, timeout=30
    )
    return "Unable to change scheduling policy" in trial.stderr


def parse_histogram(text: str) -> dict[str, float]:
    """p50/p99/max (us) and the wake-up count from cyclictest's `--histogram` output."""
    counts: list[tuple[int, int]] = []
    for line in text.splitlines():
        match = re.fullmatch(r"(\d+)\s+(\d+)", line.strip())
        if match:
            counts.append((int(match.group(1)), int(match.group(2))))
    overflow = re.search(r"# Histogram Overflows:\s*(\d+)", text)
    maximum = re.search(r"# Max Latencies:\s*(\d+)", text)
    if not counts or maximum is None:
        raise ValueError("cyclictest printed no histogram")
    if overflow is not None and int(overflow.group(1)):
        counts.append((HISTOGRAM_US, int(overflow.group(1))))
    total = sum(n for _, n in counts)

    def percentile(q: float) -> float:
        rank, seen = q * total, 0
        for latency, n in counts:
            seen += n
            if seen >= rank:
                return float(latency)
        return float(counts[-1][0])

    return {
        "wakeups": float(total),
        "p50_us": percentile(0.50),
        "p99_us": percentile(0.99),
        "max_us": float(maximum.group(1)),
    }


def run(seconds: float, rate: float, load: int, overrides: list[str]) -> dict[str, Any]:
    """The soak with cyclictest started when the load and the robot start."""
    period_us = round(1e6 / rate)
    started: list[subprocess.Popen[str]] = []
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="tempo-floor-") as tmp:
        if fifo_refused():
            shim = probe_shim(tmp)
            if shim is None:
                raise SystemExit(
                    "bench_floor: cyclictest needs SCHED_FIFO to start here, and no C compiler "
                    "is at hand to build the probe shim (see PROBE_SHIM)"
                )
            env["LD_PRELOAD"] = shim

        def beside() -> None:
            command = cyclictest_command(period_us, seconds)
            started.append(
                subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
                )
            )

        try:
            tempo = soak(seconds, rate, load, overrides, on_load=beside)
        except BaseException:
            for process in started:
                process.kill()
            raise
        if not started:
            raise SystemExit("bench_floor: the soak never started its load")
        output, errors = started[0].communicate(timeout=seconds + 60)
    try:
        floor = parse_histogram(output)
    except ValueError as exc:
        raise SystemExit(f"bench_floor: {exc}; cyclictest said: {errors.strip()[:300]}") from None
    p99 = tempo["tick_lateness_us_p99"]
    ratio = None if p99 is None or not floor["p99_us"] else p99 / floor["p99_us"]
    return {"tempo": tempo, "cyclictest": floor, "ratio_p99": ratio}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--load", type=int, default=2, help="background busy processes")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("cyclictest") is None:
        print("bench_floor: cyclictest is not installed (Debian: apt install rt-tests)")
        return 2
    result = run(args.seconds, args.rate, args.load, args.overrides)
    if args.json:
        print(json.dumps(result))
        return 0
    tempo, floor, ratio = result["tempo"], result["cyclictest"], result["ratio_p99"]
    print(
        f"{args.seconds:.0f} s at {args.rate:.0f} Hz, {args.load} busy background processes, "
        "both SCHED_OTHER"
    )
    print(f"{'':28s}{'p99 (us)':>10s}{'max (us)':>10s}")
    print(
        f"{'cyclictest (the floor)':28s}{floor['p99_us']:10.0f}{floor['max_us']:10.0f}"
        f"   ({floor['wakeups']:.0f} wake-ups)"
    )
    p99, peak = tempo["tick_lateness_us_p99"], tempo["tick_lateness_us_max"]
    shown = [f"{v:10.0f}" if v is not None else f"{'n/a':>10s}" for v in (p99, peak)]
    print(
        f"{'Tempo tick lateness':28s}{shown[0]}{shown[1]}"
        f"   ({tempo['ticks']} ticks, {tempo['missed_ticks']} missed)"
    )
    if ratio is None:
        print("ratio: n/a")
    else:
        verdict = "meets" if ratio <= GOAL_RATIO else "misses"
        print(f"ratio p99 Tempo / cyclictest: {ratio:.2f}x ({verdict} the {GOAL_RATIO}x goal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
