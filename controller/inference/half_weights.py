"""The half-precision tiers' own copy of the model, its matmul and convolution weights cast once.

Under autocast a linear layer or a convolution casts its FP32 weight (and bias) to FP16 or BF16
on every call. Compiled, that is one cast kernel per weight per step, reading and writing the
whole model: on an H100 about 60 kernels and a fifth of ACT-ALOHA's step. Stored in the half
type, the weights are what autocast would have made of them, so the results are the same and the
casts are gone. (Inductor's freezing folds the casts too, but torch does not cache a frozen
graph's AOT compilation: a warm restart took about 8 s longer on an H100. See
`RunnerConfig.freezing`.)

Only a module that says it is safe gets the copy (`precast_half_weights = True`): its matmul and
convolution weights must be used by those operations alone, under the runner's autocast (ACT;
the flow policy without RTC, whose wrapper does not ask). A module that manages its own
precision (TD-MPC2's planner switches autocast off) keeps its weights. Besides `nn.Linear` and
`nn.Conv*`, a submodule names the parameters it feeds to matmuls itself (as a
`policies.model_hooks.MatmulParameters`: ACT's attention keeps its packed input projection as
bare parameters). The FP32 reference tier
keeps the original module, and the copy shares every tensor it does not cast with it: a
quantized ACT's quantized layers hold buffers only, so they are shared, not copied.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from policies.model_hooks import hooks_of, matmul_parameter_names


def precasts_half_weights(module: nn.Module) -> bool:
    """Whether the module asks for a half-weight copy in its half-precision tiers."""
    return hooks_of(module).precast_half_weights


def half_weight_copy(
    module: nn.Module,
    dtype: torch.dtype,
    device: torch.device | None = None,
    exact: dict[int, torch.Tensor] | None = None,
) -> nn.Module:
    """A copy of `module` whose matmul and convolution parameters are stored in `dtype` (memory
    format kept, no gradients); every other tensor, buffers included, is shared with `module`,
    not copied (nothing writes them while serving), and a parameter tied to several layers
    stays one tensor. `device`: where the cast weights go (default: where each one is; the
    FP32 weights may be on the host, controller.inference.host_weights). `exact`, when given,
    collects id(original parameter) -> its cast copy for every weight the cast left unchanged
    (a checkpoint stored in `dtype`): the FP32 reference can read those copies instead of
    its own (controller.inference.host_weights.stream_host_weights)."""
    memo: dict[int, object] = {}
    for sub in module.modules():
        for name in matmul_parameter_names(sub):
            param = sub._parameters.get(name)
            if param is not None and param.is_floating_point() and id(param) not in memo:
                target = device or param.device
                if exact is None:
                    memo[id(param)] = _frozen(param.detach().to(device=target, dtype=dtype))
                    continue
                source = param.detach().to(target)  # uploaded as it is, compared where it is
                held = memo[id(param)] = _frozen(source.to(dtype))
                if torch.equal(held.to(source.dtype), source):
                    # The parameter, not its tensor: a compiled tier fusing projections points
                    # it at the fused matrix, and a kept tensor would hold the old storage too.
                    exact[id(param)] = held
    return copy_sharing_tensors(module, memo)


def _frozen(tensor: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(tensor, requires_grad=False)


def copy_sharing_tensors(module: nn.Module, memo: dict[int, object] | None = None) -> nn.Module:
    """A copy of the module tree that shares every parameter and buffer with `module` (except
    those `memo` already maps to a replacement): attributes set on the copy's submodules leave
    the original's alone, and no weight is duplicated."""
    memo = {} if memo is None else memo
    for tensor in (*module.parameters(), *module.buffers()):
        memo.setdefault(id(tensor), tensor)  # deepcopy takes what the memo has as the copy
    return copy.deepcopy(module, memo)


def half_tier_module(
    module: nn.Module,
    half: torch.dtype | None,
    device: torch.device | None = None,
    exact: dict[int, torch.Tensor] | None = None,
) -> nn.Module:
    """The module as the half-precision tiers run it: the half-weight copy when `half` is set
    and the module asks for it, else `module` itself (tools that time what is served).
    `exact`: as half_weight_copy's."""
    if half is None or not precasts_half_weights(module):
        return module
    return half_weight_copy(module, half, device, exact)
