"""The half-precision tiers' own copy of the model, its matmul and convolution weights cast once.

Under autocast a linear layer or a convolution casts its FP32 weight (and bias) to FP16 or BF16
on every call. Compiled, that is one cast kernel per weight per step, reading and writing the
whole model: on an H100 about 60 kernels and a fifth of ACT-ALOHA's step. Stored in the half
type, the weights are what autocast would have made of them, so the results are the same and the
casts are gone. (Inductor's freezing folds the casts too, but torch does not cache a frozen
graph's AOT compilation, and a warm restart took 7 s longer; see `RunnerConfig.freezing`.)

Only a module that says it is safe gets the copy (`precast_half_weights = True`): its matmul and
convolution weights must be used by those operations alone, under the runner's autocast (ACT,
the flow policy). A module that manages its own precision (TD-MPC2's planner switches autocast
off, DuQuant's layers read their FP32 weights) keeps its weights. Besides `nn.Linear` and
`nn.Conv*`, a submodule names the parameters it feeds to matmuls itself in `matmul_parameters`
(ACT's attention keeps its packed input projection as bare parameters). The FP32 reference tier
keeps the original module.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

_MATMUL_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def precasts_half_weights(module: nn.Module) -> bool:
    """Whether the module asks for a half-weight copy in its half-precision tiers."""
    return bool(getattr(module, "precast_half_weights", False))


def matmul_parameter_names(module: nn.Module) -> tuple[str, ...]:
    """The parameters of one submodule (not its children) that feed matmuls or convolutions."""
    if isinstance(module, _MATMUL_LAYERS):
        return ("weight", "bias")
    return tuple(getattr(module, "matmul_parameters", ()))


def half_weight_copy(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of `module` whose matmul and convolution parameters are stored in `dtype` (memory
    format kept, no gradients); everything else, buffers included, as it was."""
    twin = copy.deepcopy(module)
    for sub in twin.modules():
        for name in matmul_parameter_names(sub):
            param = sub._parameters.get(name)
            if param is not None and param.is_floating_point():
                sub._parameters[name] = nn.Parameter(param.detach().to(dtype), requires_grad=False)
    return twin
