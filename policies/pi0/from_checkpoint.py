"""A checkpoint read by policies.pi0.checkpoint_files -> the network that serves it.

    files = read_pi0_checkpoint(path)
    config = network_config(files)                  # Pi0Config or Pi05Config
    network = build_network(files, config, "cuda")  # weights loaded, eval mode

The checkpoint's config names its towers by variant ("gemma_2b", "gemma_300m"); the widths are
the variants' unless `widths` overrides them (LeRobot's code patched to a reduced width writes
the same variant names). The token table's rows give vocab_size. The network is built on the
device it serves from, so the real size initialises in seconds, not minutes on the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from policies.meta_device import shapes_only
from policies.pi0.config import PaliGemmaFlowConfig, Pi0Config
from policies.pi0.pi05_config import Pi05Config
from policies.pi0.weights import EMBED_TOKENS_KEY

if TYPE_CHECKING:
    from policies.pi0.checkpoint_files import Pi0CheckpointFiles
    from policies.pi0.network import PaliGemmaFlowNetwork

# Checkpoint config fields the network's config takes as they are.
_NETWORK_FIELDS = (
    "paligemma_variant", "action_expert_variant", "chunk_size", "n_action_steps",
    "max_state_dim", "max_action_dim", "num_inference_steps", "min_period", "max_period",
    "tokenizer_max_length", "image_resolution", "empty_cameras", "rtc_training_max_delay",
)  # fmt: skip


def network_config(
    files: Pi0CheckpointFiles, widths: Mapping[str, Any] | None = None, dtype: str = "float32"
) -> Pi0Config | Pi05Config:
    """The network config of a read checkpoint: its fields, the token table's row count, and
    `widths` (vision / language / expert, as policies.pi0.config's models or dicts) over the
    variants' defaults."""
    fields = {k: files.config_fields[k] for k in _NETWORK_FIELDS if k in files.config_fields}
    if "image_resolution" in fields:
        fields["image_resolution"] = tuple(fields["image_resolution"])
    table = files.tensors.get(EMBED_TOKENS_KEY)
    if table is not None:
        fields["vocab_size"] = int(table.shape[0])
    fields.update(widths or {})
    fields["dtype"] = dtype
    if files.family == "pi0":
        return Pi0Config(**fields)
    return Pi05Config(**fields)


def build_network(
    files: Pi0CheckpointFiles, config: PaliGemmaFlowConfig, device: str | torch.device = "cpu"
) -> PaliGemmaFlowNetwork:
    """The network of `config` on `device` with the checkpoint's weights, in eval mode (built
    on the meta device and materialized uninitialised: every weight comes from the checkpoint)."""
    if isinstance(config, Pi05Config):
        from policies.pi0.pi05_network import Pi05Network

        with shapes_only():
            network: PaliGemmaFlowNetwork = Pi05Network(config)
    elif isinstance(config, Pi0Config):
        from policies.pi0.network import Pi0Network

        with shapes_only():
            network = Pi0Network(config)
    else:
        raise TypeError(f"no pi0 network takes a {type(config).__name__}")
    network.to_empty(device=device)
    network.reset_buffers()
    network.load_weights(files.tensors)
    return network.eval()
