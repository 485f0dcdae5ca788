"""Check that Tempo's pi0 and pi0.5 networks compute what LeRobot's own PI0Policy / PI05Policy
compute, on weights LeRobot made and saved itself.

Needs LeRobot (source 0.6 or later, with transformers 5.4-5.5, as its `pi` extra pins) importable
beside Tempo; Tempo does not depend on either. For each family and size it builds LeRobot's
policy with random weights (seeded), saves it with LeRobot's `save_pretrained`, reads the
directory back with Tempo's checkpoint reader (`policies.pi0.checkpoint_files`), and runs both
networks on the same frames, prompt token ids, state and noise:

    LeRobot: policy.model.sample_actions(images, masks, tokens, token_masks, state, noise)
    Tempo:   Pi0Network.sample_actions(images, masks, PromptEmbedder(tokens), token_masks,
             state, noise)

Both outputs are the normalized, padded chunk (batch, chunk_size, max_action_dim): the networks
alone, before the robot's units. It prints the relative error max|tempo - lerobot| /
max|lerobot| and exits 1 if any FP32 case exceeds 1e-4. BF16 cases (both sides in LeRobot's own
mixed precision) are reported against a stated tolerance.

    python -m scripts.parity.check_pi0_parity --device cuda                  # tiny and real size
    python -m scripts.parity.check_pi0_parity --sizes tiny --device cpu      # minutes on a CPU
    python -m scripts.parity.check_pi0_parity --sizes tiny --save-reference tests/data

"tiny" is LeRobot's own code at reduced widths: its Gemma variants and SigLIP tower patched
smaller (LeRobot has no small variant: gemma_300m as the VLM fails on the image projector's fixed
2048 width), the projector rebuilt to the small width, and the 257,152-token tables cut to 512
rows, so that the saved directory is a few megabytes. `--save-reference DIR` writes that
directory as `DIR/<family>_lerobot_tiny/` with the inputs and LeRobot's outputs
(`reference.safetensors`): tests/unit/test_pi0_reference.py checks Tempo against them in CI,
where neither LeRobot nor a GPU is needed.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from scripts.measure import max_relative_error

FP32_TOLERANCE = 1e-4
BF16_TOLERANCE = 3e-2  # stated: BF16 weights and activations on both sides, errors compound
TINY_VOCAB = 512
CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
STATE_SIZE, ACTION_SIZE = 14, 14

# LeRobot's GemmaConfig fields: width, depth, mlp_dim, num_heads, num_kv_heads, head_dim.
TINY_GEMMA = {"gemma_2b": (64, 2, 128, 2, 1, 16), "gemma_300m": (32, 2, 64, 2, 1, 16)}
TINY_VISION = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
TINY_IMAGE = 56  # 4 x 4 patches of 14


def lerobot_modules(family: str) -> tuple[Any, Any, Any]:
    """(modeling module, config class, policy class) of LeRobot's `family`."""
    if family == "pi0":
        from lerobot.policies.pi0 import configuration_pi0 as conf
        from lerobot.policies.pi0 import modeling_pi0 as modeling

        return modeling, conf.PI0Config, modeling.PI0Policy
    from lerobot.policies.pi05 import configuration_pi05 as conf
    from lerobot.policies.pi05 import modeling_pi05 as modeling

    return modeling, conf.PI05Config, modeling.PI05Policy


_ORIGINALS: dict[Any, tuple[Any, Any]] = {}  # module -> its unpatched (get_gemma_config, mapping)


def unshrink_lerobot(modeling: Any) -> None:
    """Undo shrink_lerobot: the real size again, in the same process."""
    if modeling in _ORIGINALS:
        modeling.get_gemma_config, modeling.CONFIG_MAPPING = _ORIGINALS.pop(modeling)


def shrink_lerobot(modeling: Any) -> None:
    """Patch LeRobot's module to build its tiny variant (see the module doc)."""
    unshrink_lerobot(modeling)
    _ORIGINALS[modeling] = (modeling.get_gemma_config, modeling.CONFIG_MAPPING)
    gemma_config = modeling.GemmaConfig
    modeling.get_gemma_config = lambda variant: gemma_config(*TINY_GEMMA[variant])
    mapping = modeling.CONFIG_MAPPING

    def paligemma_config() -> Any:
        config = mapping["paligemma"]()
        for name, value in TINY_VISION.items():
            setattr(config.vision_config, name, value)
        return config

    modeling.CONFIG_MAPPING = {"paligemma": paligemma_config, "gemma": mapping["gemma"]}


def cut_tables(policy: Any, text_width: int, vision_width: int) -> None:
    """The tiny variant's projector at the small widths and its token tables cut to
    TINY_VOCAB rows (the classes kept, so the embedding's own scaling stays)."""
    pwe = policy.model.paligemma_with_expert
    projector = pwe.paligemma.model.multi_modal_projector
    device = projector.linear.weight.device
    projector.linear = torch.nn.Linear(vision_width, text_width, device=device)
    embed = pwe.paligemma.model.language_model.embed_tokens
    embed.weight = torch.nn.Parameter(embed.weight.data[:TINY_VOCAB].clone())
    embed.num_embeddings = TINY_VOCAB
    for head in (pwe.paligemma.lm_head, pwe.gemma_expert.lm_head):
        head.weight = torch.nn.Parameter(head.weight.data[:TINY_VOCAB].clone())
        head.out_features = TINY_VOCAB


def build_lerobot(family: str, size: str, dtype: str, device: str, seed: int) -> Any:
    """LeRobot's policy with seeded random weights, in eval mode."""
    from lerobot.configs.types import FeatureType, PolicyFeature

    modeling, config_class, policy_class = lerobot_modules(family)
    if size == "tiny":
        shrink_lerobot(modeling)
    else:
        unshrink_lerobot(modeling)
    image = TINY_IMAGE if size == "tiny" else 224
    config = config_class(dtype=dtype, device=device, image_resolution=(image, image))
    config.input_features = {
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(STATE_SIZE,)),
        **{
            f"observation.images.{name}": PolicyFeature(
                type=FeatureType.VISUAL, shape=(3, image, image)
            )
            for name in CAMERAS
        },
    }
    config.output_features = {
        "action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_SIZE,))
    }
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it runs: minutes faster at the real size
        policy = policy_class(config)
    if size == "tiny":
        cut_tables(policy, TINY_GEMMA["gemma_2b"][0], TINY_VISION["hidden_size"])
        # The adaRMS projections start at zero in LeRobot (an identity modulation); random
        # ones make the check see pi0.5's conditioning.
        for name, param in policy.model.named_parameters():
            if "dense" in name:
                torch.nn.init.normal_(param, std=0.05)
    return policy.eval()


def example_inputs(config: Any, image: int, device: str, seed: int, batch: int = 2) -> dict:
    """Frames in [-1, 1] (the last camera of robot 1 missing), prompt ids with padding, padded
    state, noise; the same tensors for both sides."""
    gen = torch.Generator().manual_seed(seed)
    length = config.tokenizer_max_length
    vocab = TINY_VOCAB if image == TINY_IMAGE else 257152
    tokens = torch.randint(0, vocab, (batch, length), generator=gen)
    token_mask = torch.zeros(batch, length, dtype=torch.bool)
    for row, used in enumerate((length // 3, length - 2)[:batch]):
        token_mask[row, :used] = True
    image_masks = torch.ones(batch, len(CAMERAS), dtype=torch.bool)
    image_masks[-1, -1] = False
    images = torch.rand(batch, len(CAMERAS), 3, image, image, generator=gen) * 2 - 1
    images[~image_masks] = -1.0  # as LeRobot fills an absent camera
    state = torch.zeros(batch, config.max_state_dim)
    state[:, :STATE_SIZE] = torch.randn(batch, STATE_SIZE, generator=gen)
    noise = torch.randn(batch, config.chunk_size, config.max_action_dim, generator=gen)
    tensors = dict(images=images, image_masks=image_masks, tokens=tokens,
                   token_mask=token_mask, state=state, noise=noise)  # fmt: skip
    return {k: v.to(device) for k, v in tensors.items()}


class SentencePieceStandIn:
    """What LeRobot's tokenizer step is given instead of the Hub's PaliGemma tokenizer (nothing
    is downloaded): saving it writes a SentencePiece model trained here, as `tokenizer.model`.
    The networks are compared on token ids, so its vocabulary plays no part in the check."""

    vocab_size = 0  # 0: as trained (a few dozen pieces); else padded to this many

    @classmethod
    def from_pretrained(cls, name: str, **kwargs: Any) -> SentencePieceStandIn:
        return cls()

    def save_pretrained(self, directory: Path) -> None:
        import io

        import sentencepiece

        model = io.BytesIO()
        lines = [f"pick up the {c} block and put it in the {b}" for c in ("red", "blue", "green")
                 for b in ("bin", "box", "tray")]  # fmt: skip
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines * 20), model_writer=model, vocab_size=32,
            hard_vocab_limit=False, minloglevel=2,
            pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        )  # fmt: skip
        proto = model.getvalue()
        if self.vocab_size:
            proto = padded_vocabulary(proto, self.vocab_size, sentencepiece)
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / "tokenizer.model").write_bytes(proto)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def padded_vocabulary(proto: bytes, size: int, sentencepiece: Any) -> bytes:
    """A SentencePiece model with unused pieces appended up to `size`: the real model's
    vocabulary size, which Tempo checks against the token table (the words are the trained
    model's; the benchmark's prompts are random ids). Appended in protobuf's wire format
    (ModelProto field 1: piece 1 string, score 2 float, type 3 = USER_DEFINED 4), so no
    protobuf package is needed."""
    count = sentencepiece.SentencePieceProcessor(model_proto=proto).vocab_size()
    extra = bytearray()
    for i in range(count, size):
        name = f"<unused{i}>".encode()
        piece = b"\x0a" + _varint(len(name)) + name + b"\x15" + struct.pack("<f", 0.0)
        piece += b"\x18\x04"
        extra += b"\x0a" + _varint(len(piece)) + piece
    return proto + bytes(extra)


def save_processors(policy: Any, family: str, directory: Path, seed: int) -> None:
    """LeRobot's own pre/post-processor files beside the weights, with random statistics."""
    from lerobot.processor import tokenizer_processor

    if family == "pi0":
        from lerobot.policies.pi0.processor_pi0 import make_pi0_pre_post_processors as make
    else:
        from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors as make
    gen = torch.Generator().manual_seed(seed)

    def stats(size: int) -> dict[str, torch.Tensor]:
        mean = torch.randn(size, generator=gen)
        spread = torch.rand(size, generator=gen) + 0.5
        return {"mean": mean, "std": spread, "min": mean - 2 * spread, "max": mean + 2 * spread,
                "q01": mean - 1.8 * spread, "q99": mean + 1.8 * spread}  # fmt: skip

    dataset_stats = {"observation.state": stats(STATE_SIZE), "action": stats(ACTION_SIZE)}
    tokenizer_processor.AutoTokenizer = SentencePieceStandIn
    preprocessor, postprocessor = make(config=policy.config, dataset_stats=dataset_stats)
    preprocessor.save_pretrained(directory)
    postprocessor.save_pretrained(directory)


@torch.no_grad()
def lerobot_chunk(policy: Any, family: str, x: dict) -> torch.Tensor:
    images = [x["images"][:, i] for i in range(x["images"].shape[1])]
    masks = [x["image_masks"][:, i] for i in range(x["image_masks"].shape[1])]
    args = [images, masks, x["tokens"], x["token_mask"]]
    if family == "pi0":  # pi0.5: the state reaches the model as prompt tokens, not as an input
        args.append(x["state"])
    return policy.model.sample_actions(*args, noise=x["noise"]).float()


def tiny_widths() -> dict[str, Any]:
    """The tiny variant's widths in Tempo's config terms (LeRobot's files name only variants)."""

    def gemma(variant: str) -> dict[str, int]:
        names = ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim")
        return dict(zip(names, TINY_GEMMA[variant], strict=True))

    vision = {"width": TINY_VISION["hidden_size"], "depth": TINY_VISION["num_hidden_layers"],
              "mlp_dim": 4304, "num_heads": TINY_VISION["num_attention_heads"],
              "patch_size": 14, "image_size": TINY_IMAGE}  # fmt: skip
    return {"vision": vision, "language": gemma("gemma_2b"), "expert": gemma("gemma_300m")}


@torch.no_grad()
def tempo_chunk(
    directory: Path, family: str, dtype: str, device: str, x: dict, widths: dict | None
) -> torch.Tensor:
    """Tempo's network from the directory LeRobot saved, through Tempo's reader."""
    from policies.pi0.checkpoint_files import read_pi0_checkpoint
    from policies.pi0.from_checkpoint import build_network, network_config
    from policies.pi0.network import Pi0Network
    from policies.pi0.pi05_network import Pi05Network
    from policies.pi0.prompt import PromptEmbedder

    files = read_pi0_checkpoint(directory)
    network = build_network(files, network_config(files, widths, dtype), device)
    embedder = PromptEmbedder.from_network(network)
    embedded = torch.from_numpy(embedder.embed(x["tokens"].cpu().numpy())).to(device)
    prefix = (x["images"], x["image_masks"], embedded, x["token_mask"])
    if isinstance(network, Pi0Network):
        return network.sample_actions(*prefix, x["state"], noise=x["noise"]).float()
    if isinstance(network, Pi05Network):  # the state is in the prompt's tokens
        return network.sample_actions(*prefix, noise=x["noise"]).float()
    raise TypeError(f"{directory} built a {type(network).__name__}, neither pi0's nor pi0.5's")


def check(family: str, size: str, dtype: str, device: str, save: Path | None) -> dict:
    started = time.perf_counter()
    policy = build_lerobot(family, size, dtype, device, seed=0)
    built_s = time.perf_counter() - started
    image = TINY_IMAGE if size == "tiny" else 224
    x = example_inputs(policy.config, image, device, seed=1)
    reference = lerobot_chunk(policy, family, x)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / f"{family}_lerobot_{size}"
        policy.save_pretrained(directory)
        # The stand-in tokenizer as large as the token table, so the directory can be served.
        SentencePieceStandIn.vocab_size = TINY_VOCAB if size == "tiny" else 257152
        save_processors(policy, family, directory, seed=2)
        del policy
        if device == "cuda":
            torch.cuda.empty_cache()
        widths = tiny_widths() if size == "tiny" else None
        ours = tempo_chunk(directory, family, dtype, device, x, widths)
        if save is not None:
            keep = save / f"{family}_lerobot_{size}"
            keep.mkdir(parents=True, exist_ok=True)
            for item in directory.rglob("*"):  # everything LeRobot wrote, as it wrote it
                if item.is_file():
                    target = keep / item.relative_to(directory)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(item.read_bytes())
            tensors = {k: v.contiguous().cpu() for k, v in x.items()}
            tensors["lerobot_actions"] = reference.cpu()
            save_file(tensors, str(keep / "reference.safetensors"))
            (keep / "tempo_widths.json").write_text(json.dumps(widths, indent=2))
    error = max_relative_error(ours, reference)
    tolerance = FP32_TOLERANCE if dtype == "float32" else BF16_TOLERANCE
    return {"family": family, "size": size, "dtype": dtype, "error": error,
            "tolerance": tolerance, "ok": error <= tolerance,
            "lerobot_build_s": round(built_s, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="pi0,pi05")
    parser.add_argument("--sizes", default="tiny,real")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--save-reference", type=Path, help="write the tiny FP32 references here")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = []
    for family in args.families.split(","):
        for size in args.sizes.split(","):
            for dtype in args.dtypes.split(","):
                save = args.save_reference if size == "tiny" and dtype == "float32" else None
                row = check(family, size, dtype, args.device, save)
                rows.append(row)
                verdict = "ok" if row["ok"] else "FAIL"
                print(f"{family:5s} {size:5s} {dtype:9s} relative error {row['error']:.2e} "
                      f"(tolerance {row['tolerance']:.0e}) {verdict}", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
