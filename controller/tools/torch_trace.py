"""`tempo profile --torch-profiler DIR`: a torch.profiler trace of serving steps, for TensorBoard
or Perfetto, and a summary table of the most expensive operators beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.inference.runner import Runner
from controller.tools.replay import ObservationSource


def torch_trace(runner: Runner, source: ObservationSource, directory: Path, steps: int) -> str:
    """A torch.profiler trace of `steps` predict_chunk calls (+1 warm-up) in `directory`."""
    from torch.profiler import (
        ProfilerActivity,
        profile,
        record_function,
        schedule,
        tensorboard_trace_handler,
    )

    directory.mkdir(parents=True, exist_ok=True)
    cuda = str(runner.status().get("device", "")).startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    before = set(directory.glob("*.pt.trace.json*"))
    write_trace = tensorboard_trace_handler(str(directory), worker_name="tempo-profile")

    def ready(prof: Any) -> None:
        write_trace(prof)
        sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        try:
            table = prof.key_averages().table(sort_by=sort, row_limit=30)
        except Exception:  # noqa: BLE001 - older/newer torch spell the sort keys differently
            table = prof.key_averages().table(row_limit=30)
        (directory / "summary.txt").write_text(table + "\n")

    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=ready,
        record_shapes=True,
    ) as prof:
        for _ in range(steps + 1):
            with record_function("tempo.predict_chunk"):
                runner.predict_chunk(*source.next())
            prof.step()
    written = sorted(set(directory.glob("*.pt.trace.json*")) - before)
    return str(written[-1]) if written else str(directory)
