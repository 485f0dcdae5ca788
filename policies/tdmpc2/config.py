"""The configuration of a TD-MPC2 agent as Tempo serves it: the world model's shapes and the
MPPI planner's settings, stored in the checkpoint next to the weights.

The model sizes are the official ones (nicklashansen/tdmpc2, `common/__init__.py` MODEL_SIZE):

    size   enc_dim  mlp_dim  latent_dim  encoder layers  Q heads
    1      256      384      128         2               2
    5      256      512      512         2               5
    19     1024     1024     768         3               5
    48     1792     1792     768         4               5
    317    4096     4096     1376        5               8

The planner defaults are the official `config.yaml` ones (512 samples, 24 from the policy prior,
64 elites, 6 iterations, horizon 3, std in [0.05, 2], temperature 0.5); `iterations` left unset
becomes 6, or 8 when the action has 20 or more entries, as the official agent does. Single-task
agents with state observations only (no task embedding, no RGB encoder).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.base import PolicySpec

ModelSize = Literal[1, 5, 19, 48, 317]

MODEL_SIZES: dict[int, dict[str, int]] = {
    1: {"enc_dim": 256, "mlp_dim": 384, "latent_dim": 128, "num_enc_layers": 2, "num_q": 2},
    5: {"enc_dim": 256, "mlp_dim": 512, "latent_dim": 512, "num_enc_layers": 2, "num_q": 5},
    19: {"enc_dim": 1024, "mlp_dim": 1024, "latent_dim": 768, "num_enc_layers": 3, "num_q": 5},
    48: {"enc_dim": 1792, "mlp_dim": 1792, "latent_dim": 768, "num_enc_layers": 4, "num_q": 5},
    317: {"enc_dim": 4096, "mlp_dim": 4096, "latent_dim": 1376, "num_enc_layers": 5, "num_q": 8},
}


class TDMPC2Config(BaseModel):
    """Shapes of one TD-MPC2 world model and how it plans."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- World model -------------------------------------------------------------------------
    obs_dim: int = Field(ge=1, le=4096, description="Length of the state observation.")
    action_dim: int = Field(ge=1, le=256, description="Entries per action.")
    model_size: ModelSize = Field(default=5, description="Official size (parameters, millions).")
    simnorm_dim: int = Field(default=8, ge=1, description="SimNorm group size on the latent.")
    num_bins: int = Field(default=101, ge=2, description="Two-hot bins of reward and Q heads.")
    vmin: float = Field(default=-10.0, description="Lowest bin centre, in symlog space.")
    vmax: float = Field(default=10.0, description="Highest bin centre, in symlog space.")
    log_std_min: float = Field(default=-10.0, description="Policy prior's lowest log-std.")
    log_std_max: float = Field(default=2.0, description="Policy prior's highest log-std.")
    episodic: bool = Field(
        default=False, description="The model has a termination head (episodic tasks)."
    )
    discount: float = Field(
        default=0.995,
        gt=0,
        le=1,
        description="Per-step discount. Official heuristic: clip((L/5 - 1) / (L/5), 0.95, "
        "0.995) for an episode of L agent steps (0.99 for DMControl: 500 agent steps, action "
        "repeat 2); `tempo checkpoint import-tdmpc2 --episode-length L` derives it so.",
    )

    # ---- Planner (MPPI) ----------------------------------------------------------------------
    horizon: int = Field(default=3, ge=1, le=64, description="Planning horizon (steps).")
    iterations: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="MPPI iterations; unset: 6, or 8 when action_dim >= 20 (official).",
    )
    num_samples: int = Field(default=512, ge=2, le=65536, description="Action sequences per plan.")
    num_pi_trajs: int = Field(
        default=24, ge=0, description="Of the samples, those rolled out by the policy prior."
    )
    num_elites: int = Field(default=64, ge=1, description="Best samples the update is fit to.")
    min_std: float = Field(default=0.05, gt=0, description="Lower clamp of the sampling std.")
    max_std: float = Field(default=2.0, gt=0, description="Upper clamp (and start) of the std.")
    temperature: float = Field(default=0.5, gt=0, description="Scale of values in the scores.")
    explore: bool = Field(
        default=False,
        description="Add exploration noise (std of the final iteration) to the chosen plan; "
        "off is the official eval mode.",
    )
    mode: Literal["plan", "prior"] = Field(
        default="plan",
        description="plan: MPPI. prior (fast mode): the policy prior's mean action, no "
        "planning (see prior_steps).",
    )
    prior_steps: int | None = Field(
        default=1,
        ge=1,
        le=64,
        description="Fast mode: how many of the chunk's actions the policy prior rolls out "
        "through the dynamics; the rest of the chunk repeats the last one. 1 (the default) is "
        "the official fast mode (encode, then one prior mean): a third of the layers of the "
        "whole rollout at horizon 3, and played newest-first, a chunk that lands every step "
        "only ever has its first action played. null: the whole horizon.",
    )

    # ---- Robot units -------------------------------------------------------------------------
    action_low: tuple[float, ...] | None = Field(
        default=None, description="Robot value of action -1, per entry (default -1)."
    )
    action_high: tuple[float, ...] | None = Field(
        default=None, description="Robot value of action +1, per entry (default +1)."
    )
    compute: Literal["fp32", "tf32", "bf16"] = Field(
        default="fp32",
        description="fp32: every tier (graph and compiled included) plans in FP32 and makes the "
        "FP32 reference's elite choices; parity is elementwise. tf32 (TF32 matmuls) or bf16 "
        "(weights pre-cast once): the runner's reduced-precision tiers (graph, compiled, "
        "eager_half on CUDA) plan in that precision, eager FP32 stays FP32; a plan is a "
        "discontinuous function of the predicted values, so parity is then the value regret "
        "of the tier's plan under the FP32 model (policies.tdmpc2.parity), within parity_regret.",
    )
    parity_regret: float = Field(
        default=0.15,
        gt=0,
        description="Largest value regret a reduced-precision tier may show at start-up: the "
        "FP32 value the tier's plan gives up against the FP32 reference's plan, as a fraction of "
        "what the reference's plan gains over random plans (random plans score about 1; BF16 "
        "planning scored up to 0.05 on random 5M agents).",
    )
    noise_seed: int = Field(
        default=0, ge=0, description="Seed of the fixed noise bank (reproducible plans only)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> TDMPC2Config:
        if self.num_pi_trajs >= self.num_samples:
            raise ValueError(
                f"num_pi_trajs ({self.num_pi_trajs}) must be below num_samples "
                f"({self.num_samples}): the rest are sampled around the mean"
            )
        if self.num_elites > self.num_samples:
            raise ValueError(
                f"num_elites ({self.num_elites}) must be at most num_samples ({self.num_samples})"
            )
        if self.prior_steps is not None and self.prior_steps > self.horizon:
            raise ValueError(
                f"prior_steps ({self.prior_steps}) must be at most horizon ({self.horizon}): "
                "the prior fills one chunk"
            )
        if self.min_std > self.max_std:
            raise ValueError(f"min_std ({self.min_std}) must be at most max_std ({self.max_std})")
        if self.latent_dim % self.simnorm_dim:
            raise ValueError(
                f"latent_dim {self.latent_dim} of model size {self.model_size} is not a multiple "
                f"of simnorm_dim {self.simnorm_dim}"
            )
        for name in ("action_low", "action_high"):
            bounds = getattr(self, name)
            if bounds is not None and len(bounds) != self.action_dim:
                raise ValueError(
                    f"{name} has {len(bounds)} values; give one per action entry "
                    f"({self.action_dim})"
                )
        low, high = self.bounds
        if any(lo >= hi for lo, hi in zip(low, high, strict=True)):
            raise ValueError("action_low must be below action_high for every entry")
        return self

    # ---- Derived -----------------------------------------------------------------------------
    @property
    def enc_dim(self) -> int:
        return MODEL_SIZES[self.model_size]["enc_dim"]

    @property
    def mlp_dim(self) -> int:
        return MODEL_SIZES[self.model_size]["mlp_dim"]

    @property
    def latent_dim(self) -> int:
        return MODEL_SIZES[self.model_size]["latent_dim"]

    @property
    def num_enc_layers(self) -> int:
        return MODEL_SIZES[self.model_size]["num_enc_layers"]

    @property
    def num_q(self) -> int:
        return MODEL_SIZES[self.model_size]["num_q"]

    @property
    def planning_iterations(self) -> int:
        if self.iterations is not None:
            return self.iterations
        return 8 if self.action_dim >= 20 else 6

    @property
    def bounds(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        low = self.action_low or (-1.0,) * self.action_dim
        high = self.action_high or (1.0,) * self.action_dim
        return tuple(low), tuple(high)


def tdmpc2_spec(config: TDMPC2Config, joint_names: tuple[str, ...] | None = None) -> PolicySpec:
    """The robot interface of a TD-MPC2 agent: its state vector in, a chunk of `horizon` actions
    out, no cameras. Raises ValueError when `joint_names` has the wrong length."""
    names = (
        tuple(joint_names) if joint_names else tuple(f"joint_{i}" for i in range(config.action_dim))
    )
    if len(names) != config.action_dim:
        raise ValueError(
            f"{len(names)} joint names were given for an agent with {config.action_dim} action "
            "entries; give one name per entry"
        )
    return PolicySpec(
        cameras=(),
        state_size=config.obs_dim,
        joint_names=names,
        chunk_size=config.horizon,
        state_history=1,
    )
