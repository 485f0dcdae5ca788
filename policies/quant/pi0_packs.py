"""Import the per-layer DuQuant packs of the public pi0 DuQuant port (openpi_duquant).

That port writes one `<layer name>.npz` per linear layer (characters other than letters,
digits, `_`, `.` and `-` in the name become `_`), holding

    weight_scale        float32 (out,)   per-output-channel 4-bit scales
    meta                a JSON string: in_features, out_features, block_size, block_out_size, ...
    perm                int64 (in,)      optional: input channels, x -> x[..., perm]
    R_in_blocks, Rin_b  int64 block indices, float32 (block, block) each: x -> x @ Rin_b per block
    R_out_blocks, Rout_b                 the same on the output side: W rows <- Rout_b W rows,
                                         y <- y @ Rout_b

and no weights (they come from the model). Packs are read with allow_pickle=False. A pack maps
onto QuantLinear as: no smoothing and no first rotation, `perm`, then the `Rin` blocks as the
second rotation (a last block narrower than block_size is padded with identity), `Rout` as the
output rotation. The 4-bit scales are recomputed from the transformed weight (as the port does
when it loads a pack); the pack's own scales are only checked for shape. Activations get
per-token scales (no calibration).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch
from torch import nn

from policies.quant.act import set_submodule
from policies.quant.config import ComputePath, LayerLayout
from policies.quant.duquant import Plan
from policies.quant.layer import QuantLinear


def pack_file_name(layer_name: str) -> str:
    """The file name the port gives a layer's pack."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", layer_name).replace("..", ".")
    return f"{name}.npz"


def import_pi0_packs(
    module: nn.Module, pack_dir: str | Path, compiled_path: ComputePath = "int8", root: str = ""
) -> dict[str, LayerLayout]:
    """Replace every nn.Linear of `module` that has a pack in `pack_dir` by a QuantLinear built
    from its weight and the pack; returns the layouts by layer name (in `module`). The packs
    are named after the layers of `module.get_submodule(root)` (a Pi0Step's `network` is the
    port's PI0Pytorch). Raises ValueError naming the pack when one is malformed or does not fit
    its layer, and when no pack matches."""
    pack_dir = Path(pack_dir)
    if not pack_dir.is_dir():
        raise ValueError(f"pack directory {pack_dir} does not exist")
    base = module.get_submodule(root) if root else module
    prefix = f"{root}." if root else ""
    layouts: dict[str, LayerLayout] = {}
    for name, linear in list(base.named_modules()):
        if not isinstance(linear, nn.Linear):
            continue
        path = pack_dir / pack_file_name(name)
        if not path.is_file():
            continue
        plan, out_rot = read_pack(path, linear.in_features, linear.out_features)
        layer = QuantLinear.from_plan(
            linear.weight, linear.bias, plan, None, compiled_path, out_rot=out_rot
        )
        set_submodule(module, prefix + name, layer)
        layouts[prefix + name] = layer.layout
    if not layouts:
        raise ValueError(f"no .npz pack in {pack_dir} matches a linear layer of the model")
    return layouts


def read_pack(path: Path, in_features: int, out_features: int) -> tuple[Plan, torch.Tensor | None]:
    """A pack as (the input-side Plan, the output rotation blocks or None)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable .npz pack without pickles ({exc})") from None
    try:
        meta = json.loads(str(arrays["meta"])) if "meta" in arrays else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: meta is not JSON ({exc})") from None
    for key, want in (("in_features", in_features), ("out_features", out_features)):
        if key in meta and int(meta[key]) != want:
            raise ValueError(f"{path}: meta says {key} {meta[key]}, the layer has {want}")
    scale = arrays.get("weight_scale")
    if scale is None or scale.shape != (out_features,):
        raise ValueError(f"{path}: weight_scale must have shape ({out_features},)")
    block = int(meta.get("block_size", 16))
    if block % 8:
        raise ValueError(f"{path}: block_size {block} is not a multiple of 8")
    width = -(-in_features // block) * block
    perm = None
    if "perm" in arrays:
        raw = arrays["perm"].astype(np.int64)
        if sorted(raw.tolist()) != list(range(in_features)):
            raise ValueError(f"{path}: perm is not a permutation of {in_features} channels")
        perm = torch.from_numpy(np.concatenate([raw, np.arange(in_features, width)]))
    rot_in = _blocks(arrays, "R_in_blocks", "Rin", in_features, block, path)
    plan = Plan(in_features, block, None, None, perm, rot_in)
    out_rot = None
    if "R_out_blocks" in arrays:
        out_block = int(meta.get("block_out_size", block))
        if out_features % out_block:
            raise ValueError(
                f"{path}: out_features {out_features} is not a multiple of block_out_size "
                f"{out_block}; such packs are not supported"
            )
        out_rot = _blocks(arrays, "R_out_blocks", "Rout", out_features, out_block, path)
    return plan, out_rot


def _blocks(
    arrays: dict[str, np.ndarray], index_key: str, prefix: str, size: int, block: int, path: Path
) -> torch.Tensor | None:
    """(n_blocks, block, block) float64 from per-block arrays; missing blocks are identity."""
    if index_key not in arrays:
        return None
    n_blocks = -(-size // block)
    out = torch.eye(block, dtype=torch.float64).expand(n_blocks, -1, -1).clone()
    for b in arrays[index_key].astype(np.int64).tolist():
        key = f"{prefix}_{b}"
        if not 0 <= b < n_blocks or key not in arrays:
            raise ValueError(f"{path}: block {b} of {index_key} is out of range or missing")
        rotation = np.asarray(arrays[key], dtype=np.float64)
        k = min(block, size - b * block)
        if rotation.shape[0] < k or rotation.shape[1] < k:
            raise ValueError(f"{path}: {key} has shape {rotation.shape}, needs at least {k}x{k}")
        rotation = rotation[:k, :k]
        if not np.allclose(rotation @ rotation.T, np.eye(k), atol=1e-3):
            raise ValueError(f"{path}: {key} is not orthogonal")
        out[b, :k, :k] = torch.from_numpy(rotation)
    return out
