"""Prompt token embedding, off the hot path: the 257152-row table is only needed when a prompt
changes, so it stays in host memory and the network takes embeddings.

Like transformers' (>= 5.4) Gemma token embedding, rows are multiplied by sqrt(width) in the
model's dtype: float32, or bfloat16 (bfloat16-rounded values) for a model LeRobot runs with
dtype="bfloat16".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor, nn

from policies.pi0.weights import EMBED_TOKENS_KEY


class PromptEmbedder:
    """Token ids -> scaled embeddings (float32 numpy), from the language model's token table."""

    def __init__(self, table: Tensor, dtype: torch.dtype = torch.float32) -> None:
        if table.ndim != 2:
            raise ValueError(f"the token table must be 2-D, got shape {tuple(table.shape)}")
        self._table = table.detach().to("cpu")
        self._dtype = dtype
        # transformers keeps the scale as a float32 scalar and casts it to the table's dtype.
        self._scale = torch.tensor(float(table.shape[1]) ** 0.5)

    @classmethod
    def from_weights(
        cls, tensors: Mapping[str, Tensor], dtype: torch.dtype = torch.float32
    ) -> PromptEmbedder:
        """From LeRobot-named weights (the key policies.pi0.weights.EMBED_TOKENS_KEY)."""
        if EMBED_TOKENS_KEY not in tensors:
            raise ValueError(f"the weights have no token table ({EMBED_TOKENS_KEY})")
        return cls(tensors[EMBED_TOKENS_KEY], dtype)

    @classmethod
    def from_network(cls, network: nn.Module) -> PromptEmbedder:
        """Sharing the token table a network holds on the host, in its config's dtype."""
        precision = getattr(getattr(network, "config", None), "dtype", "float32")
        dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
        return cls(network.get_parameter(EMBED_TOKENS_KEY), dtype)

    @property
    def vocab_size(self) -> int:
        return int(self._table.shape[0])

    @property
    def width(self) -> int:
        return int(self._table.shape[1])

    def embed(self, token_ids: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """ids of any shape -> float32 array of that shape + (width,)."""
        ids = torch.from_numpy(np.array(token_ids, dtype=np.int64))  # a copy: writable
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise ValueError(
                f"token ids must lie in [0, {self.vocab_size}), got {int(ids.min())} to "
                f"{int(ids.max())}"
            )
        rows = self._table[ids].to(self._dtype)
        return (rows * self._scale.to(self._dtype)).float().numpy()
