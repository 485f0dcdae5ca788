"""Modules built on the meta device (shapes without memory) without importing torch's compiler.

A checkpoint's module is first built on the meta device, to check the weights' shapes before
anything is allocated. Some ops have no meta kernel in C++ and run torch's Python reference
instead, and the first of those imports torch._dynamo: 2-3 s that a start from built artefacts
otherwise never spends. `shapes_only` keeps such ops off the reference kernels:
- the weights' random fills (nn.init, reset_parameters) are skipped: a meta tensor holds no
  values;
- random factories (randn, rand) give empty meta tensors, for the same reason;
- other ops on small meta tensors (the buffers a constructor computes: position tables, noise
  banks, fused copies) run on zero-filled CPU stand-ins and give back meta tensors of the
  result's shape. Large inputs stay on the meta device, as does every in-place op that may
  change a shape, and attribute access.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

# In-place ops that change a tensor's values only (never its shape, dtype or strides): what
# nn.init and the modules' own reset_parameters run.
VALUE_FILLS = frozenset({
    "normal_", "uniform_", "fill_", "zero_", "copy_", "erfinv_", "mul_", "add_", "sub_",
    "div_", "clamp_", "exponential_", "bernoulli_", "random_", "log_normal_", "cauchy_",
    "geometric_", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
    "__ipow__", "__imod__",
})  # fmt: skip
RANDOM_FACTORIES = frozenset({"randn", "rand"})  # (size..., generator=, dtype=): empty instead
RANGES = frozenset({"arange", "linspace", "logspace"})  # small ones made on the CPU
# Left on the meta device: attribute access and methods whose answer is not a tensor's shape.
KEEP_ON_META = frozenset({
    "__get__", "__set__", "item", "tolist", "type", "cpu", "cuda", "numpy", "data_ptr",
    "storage", "untyped_storage", "to_empty",
})  # fmt: skip
STAND_IN_BYTES = 64 * 2**20  # meta inputs up to this size run on CPU stand-ins


def _range_length(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """How many numbers arange/linspace/logspace make (inf when the arguments are unusual)."""
    try:
        if name == "arange":
            numbers = [float(a) for a in args[:3]]
            start, end = (0.0, numbers[0]) if len(numbers) == 1 else (numbers[0], numbers[1])
            step = numbers[2] if len(numbers) == 3 else float(kwargs.get("step", 1))
            return max(0.0, (end - start) / step)
        return float(args[2] if len(args) > 2 else kwargs["steps"])
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return float("inf")


def _meta(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_meta


def _stand_in(value: Any) -> Any:
    return torch.zeros(value.shape, dtype=value.dtype, device="cpu") if _meta(value) else value


def _to_meta(value: Any) -> Any:
    return value.to("meta") if isinstance(value, torch.Tensor) else value


class _ShapesOnly(TorchFunctionMode):
    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        # nn.init's fills pass their tensor by keyword (`tensor=`) to this hook.
        target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
        if name in VALUE_FILLS and _meta(target):
            return target
        metas = [leaf for leaf in tree_flatten((args, kwargs))[0] if _meta(leaf)]
        if not metas:
            if kwargs.get("device") is not None:
                return func(*args, **kwargs)
            if name in RANDOM_FACTORIES:
                kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
                return torch.empty(*args, **{**kwargs, "device": "meta"})
            if name in RANGES and _range_length(name, args, kwargs) * 8 <= STAND_IN_BYTES:
                return func(*args, **{**kwargs, "device": "cpu"}).to("meta")
            return func(*args, **kwargs)
        small = sum(t.numel() * t.element_size() for t in metas) <= STAND_IN_BYTES
        in_place = name.endswith("_") and not name.endswith("__")  # unsqueeze_, resize_, ...
        if not small or in_place or name in KEEP_ON_META:
            return func(*args, **kwargs)
        with torch.device("cpu"):  # what the op makes inside (a scalar's tensor) too
            result = func(*tree_map(_stand_in, args), **tree_map(_stand_in, kwargs))
        if not any(isinstance(leaf, torch.Tensor) for leaf in tree_flatten(result)[0]):
            return result  # size(), dim(): as they were (a torch.Size stays one)
        return tree_map(_to_meta, result)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Build modules on the meta device (as `with torch.device("meta")`) without running
    torch's Python reference kernels (see the module doc)."""
    with torch.device("meta"), _ShapesOnly():
        yield
