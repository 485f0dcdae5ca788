"""What check_smolvla_parity.py and bench_smolvla.py build LeRobot's SmolVLA from, with nothing
downloaded: a SmolVLM Hugging Face config (tiny, or SmolVLM2-500M's real widths) and a small
byte-level BPE tokenizer trained here, placed in a private Hugging Face cache as the snapshot of
a made-up repository, so LeRobot's `AutoConfig.from_pretrained(vlm_model_name)` and its
tokenizer step (`AutoTokenizer`) read them offline, as they read SmolVLM2's from a user's cache.

LeRobot's SmolVLMWithExpertModel also loads the repository's processor, only for two image
token ids that serve when `add_image_special_tokens` is on (it is off here and in smolvla_base);
`patch_processor` stands a small object in for it.

Runs in LeRobot's environment (transformers, tokenizers); imports no Tempo code.
"""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any

REPO = "tempo-tests/tiny-smolvlm"
COMMIT = "0" * 40
TEXTS = [
    "pick up the red cube and put it in the box",
    "open the drawer",
    "push the T into the target",
    "stack the blue block on the green block",
    "fold the towel",
]

TINY_VLM: dict[str, Any] = {
    "vision_config": {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "image_size": 32, "patch_size": 4,
    },
    "text_config": {
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 320, "rms_norm_eps": 1e-5,
    },
    "scale_factor": 2,
}  # fmt: skip
# SmolVLM2-500M-Video-Instruct's widths (its Hugging Face config).
REAL_VLM: dict[str, Any] = {
    "vision_config": {
        "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "image_size": 512, "patch_size": 16,
    },
    "text_config": {
        "model_type": "llama", "hidden_size": 960, "intermediate_size": 2560,
        "num_hidden_layers": 32, "num_attention_heads": 15, "num_key_value_heads": 5,
        "head_dim": 64, "vocab_size": 49280, "rms_norm_eps": 1e-5,
    },
    "scale_factor": 4,
}  # fmt: skip


def snapshot_dir(cache: Path) -> Path:
    return cache / ("models--" + REPO.replace("/", "--")) / "snapshots" / COMMIT


def make_hub_cache(cache: Path, real_size: bool) -> Path:
    """Write the backbone's config and a tokenizer as REPO's cached snapshot under `cache`;
    point Hugging Face's libraries at it, offline (before they are imported: they read the
    variables once). Returns the snapshot."""
    os.environ["HF_HUB_CACHE"] = str(cache)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import SmolVLMConfig

    snapshot = snapshot_dir(cache)
    snapshot.mkdir(parents=True, exist_ok=True)
    refs = cache / ("models--" + REPO.replace("/", "--")) / "refs"
    refs.mkdir(exist_ok=True)
    (refs / "main").write_text(COMMIT)
    SmolVLMConfig(**(REAL_VLM if real_size else TINY_VLM)).save_pretrained(snapshot)
    write_tokenizer(snapshot)
    return snapshot


def write_tokenizer(folder: Path) -> None:
    """A byte-level BPE (SmolLM2's kind) of about 300 tokens with a BOS, as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator([t + "\n" for t in TEXTS] * 4, trainer)
    bos = tokenizer.token_to_id("<|im_start|>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", bos)]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "pad_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "model_max_length": 8192,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def patch_processor() -> None:
    """LeRobot's SmolVLMWithExpertModel loads the processor for two token ids only."""
    import lerobot.policies.smolvla.smolvlm_with_expert as with_expert

    tokenizer = types.SimpleNamespace(fake_image_token_id=1, global_image_token_id=2)
    processor = types.SimpleNamespace(tokenizer=tokenizer)
    with_expert.AutoProcessor = types.SimpleNamespace(  # type: ignore[attr-defined]
        from_pretrained=lambda *args, **kwargs: processor
    )
