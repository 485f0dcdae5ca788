"""The runner asks a policy's module only through the declared hooks (policies.model_hooks)."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from controller.inference.half_weights import precasts_half_weights  # noqa: E402
from controller.inference.tiers import compile_options, precision_scope  # noqa: E402
from policies.model_hooks import (  # noqa: E402
    MatmulParameters,
    ServedModule,
    hooks_of,
    matmul_parameter_names,
)


class Asks(ServedModule):
    precast_half_weights = True

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.entered: list[str] = []

    def compile_options(self) -> dict[str, object]:
        return {"triton.multi_kernel": 1}

    @contextlib.contextmanager
    def precision_scope(self):  # type: ignore[no-untyped-def,override]
        self.entered.append("in")
        yield


class Packed(MatmulParameters):
    matmul_parameters = ("packed_weight",)


def test_a_served_module_is_asked_its_own_hooks() -> None:
    module = Asks()
    assert hooks_of(module) is module
    assert compile_options(module) == {"triton.multi_kernel": 1}
    assert precasts_half_weights(module)
    with precision_scope(module, torch.float16)():
        pass
    assert module.entered == ["in"]
    with precision_scope(module, None)():  # eager FP32: never the module's scope
        pass
    assert module.entered == ["in"]


def test_a_plain_module_gets_the_defaults() -> None:
    module = nn.Sequential(nn.Conv2d(3, 4, 3))
    assert compile_options(module) == {}
    assert not precasts_half_weights(module)
    served = hooks_of(module).use_channels_last()
    assert served[0].weight.is_contiguous(memory_format=torch.channels_last)


def test_matmul_parameters_are_declared_not_guessed() -> None:
    assert matmul_parameter_names(nn.Linear(2, 2)) == ("weight", "bias")
    assert matmul_parameter_names(Packed()) == ("packed_weight",)
    plain = nn.Module()
    plain.matmul_parameters = ("weight",)  # an attribute of that name alone is no declaration
    assert matmul_parameter_names(plain) == ()
