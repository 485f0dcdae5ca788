"""The pi0.5 network: pi0's prefix and Euler loop (policies.pi0.network) with action tokens only
and the time embedding turned by time_mlp_in/out into the adaRMS conditioning of every norm of
the expert, as LeRobot's PI05Pytorch.embed_suffix does. The state is not an input: pi0.5 reads
it from the prompt tokens."""

from __future__ import annotations

import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.pi0.backbone import PrefixCache
from policies.pi0.network import PaliGemmaFlowNetwork, sincos_time_embedding
from policies.pi0.pi05_config import Pi05Config


class Pi05Network(PaliGemmaFlowNetwork):
    """pi0.5: actions in through action_in_proj, time through adaRMS."""

    def __init__(self, config: Pi05Config) -> None:
        super().__init__(config)
        width = config.expert.width
        self.time_mlp_in = nn.Linear(width, width)
        self.time_mlp_out = nn.Linear(width, width)

    def embed_suffix(
        self, x_t: Tensor, time: Tensor, state: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        if state is not None:
            raise ValueError("pi0.5 takes no state input: the state belongs in the prompt tokens")
        time_emb = sincos_time_embedding(
            time, self.action_in_proj.out_features, self.config.min_period, self.config.max_period
        )
        cond = self.time_mlp_in(time_emb.to(self.time_mlp_in.weight.dtype))
        cond = F.silu(self.time_mlp_out(F.silu(cond)))
        actions = self.action_in_proj(x_t.to(self.action_in_proj.weight.dtype))
        return actions, cond

    def velocity(self, cache: PrefixCache, x_t: Tensor, time: Tensor) -> Tensor:
        """One denoising step: the flow's velocity (B, chunk_size, max_action_dim) at x_t."""
        return self._velocity(cache, x_t, time, None)

    def velocity_without_cache(
        self, prefix: Tensor, prefix_pad: Tensor, x_t: Tensor, time: Tensor
    ) -> Tensor:
        """velocity recomputing the prefix jointly with the suffix (LeRobot's training pass)."""
        return self._velocity_without_cache(prefix, prefix_pad, x_t, time, None)

    def denoise(self, cache: PrefixCache, noise: Tensor) -> Tensor:
        """All Euler steps from noise (t=1) to actions (t=0) against the cached prefix."""
        return self._denoise(cache, noise, None)

    def sample_actions(
        self,
        images: Tensor,
        image_masks: Tensor,
        prompt_embeddings: Tensor,
        prompt_mask: Tensor,
        noise: Tensor,
    ) -> Tensor:
        """Actions (B, chunk_size, max_action_dim), float32."""
        cache = self.encode_prefix(
            *self.embed_prefix(images, image_masks, prompt_embeddings, prompt_mask)
        )
        return self._denoise(cache, noise, None)
