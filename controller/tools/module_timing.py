"""Where the time goes inside an eager forward: one timing per top-level submodule.

    with SubmoduleTimer(module, device) as timer:
        times = timer.measure(lambda: module(images, state))   # {"backbone": s, ..., FORWARD: s}

Forward pre- and post-hooks on each direct child of `module` mark where the child starts and
ends. On a CPU they read `time.perf_counter_ns` (CPU execution is synchronous, so no
synchronize is needed and none is done); on CUDA they record CUDA events on the current stream,
and `measure` synchronizes once after the whole forward to read them (profiling only: never in
the daemon). A child called several times in one forward gets the sum. Work that happens in
`forward` outside any child (input conversion, normalization by method calls, concatenation,
the output's unnormalization) is `forward - sum(children)`, reported as its own row.

Hooks are removed on exit. Never leave them on a module a compiled tier will call: dynamo
guards on a module's hooks, and a recompile while serving is an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

FORWARD = "__forward__"


class SubmoduleTimer:
    def __init__(self, module: nn.Module, device: torch.device | str) -> None:
        self.module = module
        self.device = torch.device(device)
        self.children = [(name, child) for name, child in module.named_children()]
        self._cuda = self.device.type == "cuda"
        self._handles: list[Any] = []
        self._open: dict[str, Any] = {}
        self._cpu_total: dict[str, int] = {}
        self._pairs: list[tuple[str, Any, Any]] = []
        self.called: set[str] = set()

    def __enter__(self) -> SubmoduleTimer:
        for name, child in self.children:
            self._handles.append(child.register_forward_pre_hook(self._pre(name)))
            self._handles.append(child.register_forward_hook(self._post(name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            if self._cuda:
                begin = torch.cuda.Event(enable_timing=True)
                begin.record()
                self._open[name] = begin
            else:
                self._open[name] = time.perf_counter_ns()

        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            began = self._open.pop(name, None)
            if began is None:
                return
            self.called.add(name)
            if self._cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self._pairs.append((name, began, end))
            else:
                self._cpu_total[name] = self._cpu_total.get(name, 0) + (
                    time.perf_counter_ns() - began
                )

        return hook

    def measure(self, forward: Callable[[], Any]) -> dict[str, float]:
        """Run `forward` once; seconds per child that ran, and FORWARD (the whole call)."""
        self._cpu_total.clear()
        self._pairs.clear()
        self._open.clear()
        if self._cuda:
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            forward()
            end.record()
            torch.cuda.synchronize(self.device)
            out: dict[str, float] = {}
            for name, b, e in self._pairs:
                out[name] = out.get(name, 0.0) + b.elapsed_time(e) / 1e3
            out[FORWARD] = begin.elapsed_time(end) / 1e3
            return out
        started = time.perf_counter_ns()
        forward()
        total = time.perf_counter_ns() - started
        out = {name: ns / 1e9 for name, ns in self._cpu_total.items()}
        out[FORWARD] = total / 1e9
        return out
