"""Settings of the policy runner (the tier ladder). Imports pydantic only, never torch, so the
daemon's config can be loaded and checked without the model stack.

The tiers, highest first (see `controller.inference.runner`):

    graph       torch.compile + one CUDA graph replayed over static GPU buffers   (CUDA only)
    compiled    torch.compile, called directly                                   (CUDA or CPU)
    eager_half  eager under FP16/BF16 autocast                                   (CUDA only)
    eager_fp32  eager FP32: the reference every other tier is checked against    (CUDA or CPU)

On a machine without CUDA, `top_tier: auto` starts at `eager_fp32`: compiling the demo ACT on a
CPU takes ~40 s and measured no faster. `graph` and `eager_half` need CUDA and are skipped there
whatever `top_tier` says, so `top_tier: compiled` (or `graph`) gives the CPU ladder `compiled` ->
`eager_fp32`, in FP32 (half precision on a CPU is slow on most CPUs and is not what the daemon
serves on the robot). `top_tier: eager_fp32` starts in well under a second (no compiling): use it
for tests and demos that do not exercise the ladder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TierName = Literal["graph", "compiled", "eager_half", "eager_fp32"]
TIER_ORDER: tuple[TierName, ...] = ("graph", "compiled", "eager_half", "eager_fp32")
"""The ladder, highest first. Every tier below the serving one is a ready fallback."""


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/tempo/compile` (where the demo keeps its checkpoint too), else
    `~/.cache/tempo/compile`. A relative XDG_CACHE_HOME is ignored, as the XDG spec says."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(base):
        return Path(base) / "tempo" / "compile"
    return Path("~/.cache/tempo/compile")


class RunnerConfig(BaseModel):
    """How the policy is served: which tiers, their checks, and when to step down."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    top_tier: Literal["auto"] | TierName = Field(
        default="auto",
        description="The highest tier to try; every tier below it is built as a fallback. "
        "auto: graph on CUDA; eager_fp32 on a CPU, where compiling the demo ACT takes ~40 s "
        "and measured no faster (set compiled to get the CPU ladder). Without CUDA, graph "
        "starts at compiled. eager_fp32 starts fastest (no compile).",
    )
    precision: Literal["fp16", "bf16"] = Field(
        default="fp16",
        description="Half-precision type of the graph, compiled and eager_half tiers on CUDA "
        "(autocast: matmuls and convolutions in half, reductions and norms in FP32). On a CPU "
        "the compiled tier runs FP32.",
    )
    compile_mode: Literal["default", "max-autotune-no-cudagraphs"] = Field(
        default="default",
        description="torch.compile mode. max-autotune-no-cudagraphs benchmarks kernel choices "
        "(minutes longer to compile cold; cached after). The runner captures the CUDA graph "
        "itself, so modes that add their own graphs are not offered.",
    )
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        default="inductor",
        description="inductor generates kernels (what you want). aot_eager and eager are "
        "debugging aids: they trace the model like inductor but run it eagerly.",
    )
    fullgraph: bool = Field(
        default=True,
        description="Require the model to trace as one graph; a graph break then fails the "
        "compiled tiers with the break's location in the log instead of slowing them down.",
    )
    freezing: bool = Field(
        default=False,
        description="Inductor freezing: fold the weights into the compiled graph as constants. "
        "On an H100, ACT-ALOHA's model went from 0.849 to 0.816 ms (its weights already in half "
        "precision, see controller.inference.half_weights), but torch does not cache a frozen "
        "graph's AOT compilation, so every start takes longer (warm: about 8 s more). The "
        "weights must not change after start.",
    )
    channels_last: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Store convolution weights channels_last. auto: on for CUDA when the model "
        "has 2-D convolutions (faster with cuDNN in half precision; measure with `tempo "
        "bench`), off on a CPU.",
    )
    reference_weights: Literal["device", "host"] = Field(
        default="device",
        description="Where the FP32 reference tier (eager_fp32) keeps its matmul weights. host: "
        "in host memory, each layer's brought to the device while it runs, so the device holds "
        "only the half copy the serving tiers run (pi0 on an H100: 16.7 -> about 6 GB). A "
        "weight the half copy holds exactly (a checkpoint stored in BF16) is cast back from "
        "that copy; the others are pinned and read over PCIe once per reference step (seconds "
        "more at start-up and for each fault check). The checkpoint is read on the host, not "
        "onto the device (pi0 in bf16 on an H200: 15.2 s from read to ready, against 24.1 s "
        "read onto the GPU). Needs a model that keeps a half copy "
        "(precast_half_weights) on a CUDA device; elsewhere it is refused at start.",
    )
    cudnn_benchmark: bool = Field(
        default=False,
        description="Let cuDNN time its convolution algorithms once per shape and precision. "
        "It can pick faster kernels but is not cached across restarts (seconds on every start, "
        "against the warm-restart budget); off uses cuDNN's heuristics. Process-wide setting.",
    )
    warmup_steps: int = Field(
        default=3, ge=1, le=100, description="Steps run on each tier before capture and checks."
    )
    parity_rtol: float = Field(
        default=1e-2,
        gt=0,
        le=1.0,
        description="Largest accepted relative error ||out - ref|| / ||ref|| of a tier against "
        "eager_fp32, on every parity observation.",
    )
    reference_parity_rtol: float = Field(
        default=0.5,
        gt=0,
        le=10.0,
        description="For a policy that carries reference chunks (a quantized checkpoint: its "
        "FP32 unquantized model's): largest accepted relative error of every tier, eager_fp32 "
        "included, against them. Quantization's own error (reported per tier as "
        "reference_error): the default only refuses a broken quantization; tighten it to what "
        "your model measured. parity_rtol still checks each tier against eager_fp32 (for W4A8, "
        "the fake-quant reference).",
    )
    parity_observations: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Random observations (a different one each) every tier is checked on.",
    )
    step_budget_ms: float | None = Field(
        default=20.0,
        gt=0,
        le=10_000,
        description="Time one predict_chunk may take (upload, model, download). Steps over it "
        "count as overruns; a failed step is re-run on the next tier only if that still fits. "
        "Default: one control period at 50 Hz. null: no budget (never demote for time; always "
        "re-run).",
    )
    overrun_k: int = Field(
        default=3, ge=1, le=1000, description="Demote after this many overruns ..."
    )
    overrun_n: int = Field(default=20, ge=1, le=1000, description="... within the last n steps.")
    cache_dir: Path | None = Field(
        default_factory=default_cache_dir,
        description="Persistent compile cache (inductor/Triton caches and a saved mega-cache "
        "per model, torch version and GPU), so a restart is ready in seconds. It holds pickled "
        "compiler artifacts: keep it private to the daemon's user. null: torch's default "
        "temporary cache. Default: $XDG_CACHE_HOME/tempo/compile when XDG_CACHE_HOME is set, "
        "else ~/.cache/tempo/compile.",
    )
    built_artefacts: Literal["auto", "off"] = Field(
        default="auto",
        description="auto: where `tempo build` made artefacts for this policy (the checkpoint's "
        "tempo_build/ folder, or the compile cache's built/ folder when the checkpoint's was "
        "not writable, or artefacts_dir), the compiled tiers load them instead of tracing and "
        "compiling; one built for another GPU, torch, Tempo or runner settings, or corrupt, is "
        "refused and rebuilt there. On CUDA each new package is first loaded by a fresh "
        "process, and one that fails there is recorded for the compile-cache route. Without "
        "such a folder nothing changes. off: never. (aot, from when auto left CUDA out, reads "
        "as auto.)",
    )

    @field_validator("built_artefacts", mode="before")
    @classmethod
    def _aot_is_auto(cls, value: object) -> object:
        return "auto" if value == "aot" else value

    artefacts_dir: Path | None = Field(
        default=None,
        description="The built artefacts' folder; null: found as built_artefacts says. They are "
        "compiled code: trust the folder like the checkpoint and keep it private.",
    )
    serve_slower_tiers: bool = Field(
        default=False,
        description="Serve a tier even when its start-up step took more than 1.5x (and 2 ms "
        "more than) a lower tier's: off, such a tier is reported skipped with both times "
        "(inductor's code for a large model on a CPU can be slower than eager). On: tests of "
        "a tier's own behaviour, or comparing tiers.",
    )
    repromote_after_s: float | None = Field(
        default=None,
        gt=0,
        description="After a demotion, try the higher tiers again once this many seconds have "
        "passed, each only through a fresh parity check (run inside the next predict_chunk, "
        "which then takes several steps' time). null: never re-promote.",
    )

    @model_validator(mode="after")
    def _k_within_n(self) -> RunnerConfig:
        if self.overrun_k > self.overrun_n:
            raise ValueError(
                f"overrun_k ({self.overrun_k}) must be at most overrun_n ({self.overrun_n}): "
                "k overruns are counted within the last n steps"
            )
        return self
