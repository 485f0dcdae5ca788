"""Where the time goes inside an eager forward: one timing per top-level submodule.

    with SubmoduleTimer(module, device) as timer:
        times = timer.measure(lambda: module(images, state))   # {"backbone": s, ..., FORWARD: s}

Forward pre- and post-hooks on each direct child of `module` begin and end a span of a
`DeviceTimer` (controller.inference.device_timer) where the child starts and ends: on a CPU the
wall clock (CPU execution is synchronous, so nothing is synchronized); on CUDA events on the
current stream, read after the whole forward, which waits for them (profiling only: never in
the daemon). A child called several times in one forward gets the sum. Work that happens in
`forward` outside any child (input conversion, normalization by method calls, concatenation,
the output's unnormalization) is `forward - sum(children)`, reported as its own row.

Hooks are removed on exit. Never leave them on a module a compiled tier will call: dynamo
guards on a module's hooks, and a recompile while serving is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from controller.inference.device_timer import DeviceTimer, Span

FORWARD = "__forward__"


class SubmoduleTimer:
    def __init__(self, module: nn.Module, device: torch.device | str) -> None:
        self.module = module
        self.device = torch.device(device)
        self.children = [(name, child) for name, child in module.named_children()]
        self._timer = DeviceTimer(self.device)
        self._handles: list[Any] = []
        self._open: dict[str, Span] = {}
        self._spans: list[tuple[str, Span]] = []
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
            span = self._open[name] = self._timer.span()
            span.begin()

        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            span = self._open.pop(name, None)
            if span is None:
                return
            span.end()
            self.called.add(name)
            self._spans.append((name, span))

        return hook

    def measure(self, forward: Callable[[], Any]) -> dict[str, float]:
        """Run `forward` once; seconds per child that ran, and FORWARD (the whole call)."""
        self._spans.clear()
        self._open.clear()
        _, total = self._timer.time(forward)
        out: dict[str, float] = {}
        for name, span in self._spans:
            out[name] = out.get(name, 0.0) + span.seconds()
        out[FORWARD] = total
        return out
