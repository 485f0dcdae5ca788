"""A prompted policy's tokenizer travels inside its Tempo checkpoint.

A spec names its tokenizer file by path (policies.base.PromptSpec.tokenizer). Written, the
file is copied to `tokenizer/tokenizer.model` in the checkpoint (a SmolVLA's Hugging Face
tokenizer to `tokenizer/tokenizer.json`) and the spec names it relative
to the directory, so the checkpoint stands alone; read, the relative name is resolved against
the directory it was read from.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from controller.errors import CheckpointError
from policies.base import PolicySpec

TOKENIZER_FILE = "tokenizer/tokenizer.model"  # relative to the checkpoint's directory
HF_TOKENIZER_FILE = "tokenizer/tokenizer.json"  # template "smolvla"


def with_tokenizer_copied(spec: PolicySpec, directory: Path) -> PolicySpec:
    """The spec as written into `directory`: its tokenizer copied there and named relatively
    (a spec without a prompt is returned as it is)."""
    if spec.prompt is None:
        return spec
    name = HF_TOKENIZER_FILE if spec.prompt.template == "smolvla" else TOKENIZER_FILE
    source, copy = Path(spec.prompt.tokenizer), directory / name
    if not source.is_file():
        raise CheckpointError(f"the policy's tokenizer {source} is not a file to copy along")
    copy.parent.mkdir(parents=True, exist_ok=True)
    if not (copy.exists() and copy.samefile(source)):
        shutil.copyfile(source, copy)
    prompt = spec.prompt.model_copy(update={"tokenizer": name})
    return spec.model_copy(update={"prompt": prompt})


def with_tokenizer_resolved(spec: PolicySpec, directory: Path) -> PolicySpec:
    """The spec as read from `directory`: a relative tokenizer name made absolute, refused in
    one sentence when the file is missing."""
    if spec.prompt is None or Path(spec.prompt.tokenizer).is_absolute():
        return spec
    path = (directory / spec.prompt.tokenizer).resolve()
    if not path.is_file():
        raise CheckpointError(
            f"{directory} names its tokenizer {spec.prompt.tokenizer}, which is missing"
        )
    prompt = spec.prompt.model_copy(update={"tokenizer": str(path)})
    return spec.model_copy(update={"prompt": prompt})
