"""ACT (Action Chunking with Transformers): config, model, and a demo checkpoint maker."""

from policies.act.config import ACTConfig
from policies.act.model import ACT

__all__ = ["ACT", "ACTConfig"]
