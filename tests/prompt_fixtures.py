"""A tiny SentencePiece model trained in the test itself (nothing downloaded), with Gemma's
special ids (pad 0, eos 1, bos 2, unk 3) and normalization (identity, no dummy prefix, digits
split, "\\n" its own token), so prompts tokenize the way a PaliGemma tokenizer frames them."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np

WORDS = (
    "pick up the red green blue cube and place it in on box open close drawer door push "
    "button fold towel stack cups pour water left right arm"
).split()
VOCAB_SIZE = 200


def _sentences(seed: int) -> Iterator[str]:
    rng = np.random.default_rng(seed)
    for _ in range(1500):
        task = " ".join(rng.choice(WORDS, int(rng.integers(2, 8))))
        state = " ".join(str(v) for v in rng.integers(-1, 256, 6))
        yield f"Task: {task}, State: {state};\nAction: "


def train_tokenizer(path: Path, vocab_size: int = VOCAB_SIZE, seed: int = 0, **options) -> Path:
    """Train a model into `path` (a few hundred ms) and return the path."""
    import sentencepiece

    model = io.BytesIO()
    settings = {
        "model_type": "bpe",
        "pad_id": 0,
        "eos_id": 1,
        "bos_id": 2,
        "unk_id": 3,
        "normalization_rule_name": "identity",
        "add_dummy_prefix": False,
        "remove_extra_whitespaces": False,
        "split_digits": True,
        "user_defined_symbols": ["\n"],
        "character_coverage": 1.0,
        "minloglevel": 2,
        **options,
    }
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=_sentences(seed), model_writer=model, vocab_size=vocab_size, **settings
    )
    path.write_bytes(model.getvalue())
    return path
