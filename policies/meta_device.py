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
  result's shape. Left on the meta device: large inputs, in-place ops other than fills (they
  may change a shape), `out=` ops, casts and views (C++ meta kernels), attribute access, and
  what answers with values (item, nonzero, bool), which a zero stand-in would answer wrongly.
  An op the zeros make fail runs on the meta device too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

# In-place ops that change a tensor's values only (never its shape, dtype or strides): what
# nn.init and the modules' own reset_parameters run. On a meta tensor they are skipped.
VALUE_FILLS = frozenset({
    "normal_", "uniform_", "fill_", "zero_", "copy_", "erfinv_", "mul_", "add_", "sub_",
    "div_", "clamp_", "exponential_", "bernoulli_", "random_", "log_normal_", "cauchy_",
    "geometric_", "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
    "__ifloordiv__", "__ipow__", "__imod__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
    "__irshift__", "__imatmul__",
})  # fmt: skip
RANDOM_FACTORIES = frozenset({"randn", "rand"})  # (size..., generator=, dtype=): empty instead
RANGES = frozenset({"arange", "linspace", "logspace"})  # small ones made on the CPU
# Run on the meta device as they are: attribute access; casts, copies and views (C++ meta
# kernels, no reference kernel); and what answers with values, or a shape that depends on them,
# which the meta device refuses and a zero stand-in would answer wrongly.
KEEP_ON_META = frozenset({
    "__get__", "__set__", "to", "float", "half", "bfloat16", "double", "type_as", "clone",
    "detach", "contiguous", "view", "reshape", "__getitem__", "t", "transpose", "permute",
    "expand", "squeeze", "unsqueeze", "flatten", "to_empty", "item", "tolist", "type", "cpu",
    "cuda", "numpy", "data_ptr", "storage", "untyped_storage", "__bool__", "__int__",
    "__float__", "__index__", "__repr__", "__format__", "equal", "allclose", "nonzero",
    "argwhere", "masked_select", "unique", "unique_consecutive", "repeat_interleave",
})  # fmt: skip
STAND_IN_BYTES = 16 * 2**20  # meta inputs up to this size run on CPU stand-ins


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
            return None if name == "__setitem__" else target
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
        if not small or in_place or "out" in kwargs or name in KEEP_ON_META:
            return func(*args, **kwargs)
        try:
            # The CPU's random state as it was after (randn_like, dropout); inside, what the op
            # makes (a scalar's tensor) on the CPU too.
            with torch.random.fork_rng(devices=[]), torch.device("cpu"):
                result = func(*tree_map(_stand_in, args), **tree_map(_stand_in, kwargs))
        except Exception:  # noqa: BLE001 - zeros it cannot take (an inverse): as on meta
            return func(*args, **kwargs)
        if not any(isinstance(leaf, torch.Tensor) for leaf in tree_flatten(result)[0]):
            return result  # size(), dim(): as they were (a torch.Size stays one)
        return tree_map(_to_meta, result)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Build modules on the meta device (as `with torch.device("meta")`) without running
    torch's Python reference kernels (see the module doc)."""
    with torch.device("meta"), _ShapesOnly():
        yield
