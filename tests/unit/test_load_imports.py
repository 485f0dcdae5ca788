"""Checkpoints load without torch's compiler or another family's kernels: a start from built
artefacts never needs them, and on a GPU they cost seconds (measured on an H200: 2-3 s for
torch._dynamo, which the meta-device shell's reference kernels imported; about 5 s when another
family's Triton op imported inductor). A module is first built on the meta device to check the
weights' shapes (policies.meta_device); the family is found without importing the others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from policies.meta_device import shapes_only  # noqa: E402

# A fresh Python loads the checkpoint folder argv[1] and names what it imported of these: the
# compiler, and the modules whose Triton ops register through inductor on a GPU.
HEAVY = (
    "torch._dynamo",
    "torch._inductor",
    "policies.tdmpc2.norm_kernels",
    "policies.quant.kernels",
)
LOAD = """
import sys
from policies.checkpoints.load import load_checkpoint
policy = load_checkpoint(sys.argv[1])
print("imported:", *[m for m in sys.argv[2:] if m in sys.modules])
"""


def test_modules_built_shapes_only_have_their_shapes_on_the_meta_device() -> None:
    with shapes_only():
        conv, linear = nn.Conv2d(3, 8, 3), nn.Linear(8, 5)
        embedding, norm = nn.Embedding(10, 4, padding_idx=0), nn.BatchNorm2d(8)
        attention = nn.MultiheadAttention(8, 2)
        plain = torch.empty(3, 4)
        nn.init.trunc_normal_(plain)
        nn.init.kaiming_normal_(plain)
    assert conv.weight.shape == (8, 3, 3, 3) and linear.bias.shape == (5,)
    assert embedding.weight.shape == (10, 4) and norm.running_var.shape == (8,)
    assert attention.in_proj_weight.shape == (24, 8)
    with shapes_only():  # computed buffers keep their shapes; answers that are not tensors too
        table = torch.arange(6, dtype=torch.float32).reshape(2, 3).cumsum(1)
        size = table.size()
        joined = torch.cat([table, table.sin()])
    assert table.is_meta and joined.shape == (4, 3) and isinstance(size, torch.Size)
    # As plain meta: in-place writes to a real tensor happen, questions about values are
    # refused, and the CPU's random state is left as it was.
    state, written = torch.get_rng_state(), torch.zeros(2, 2)
    with shapes_only():
        written[:] = torch.ones(2, device="cpu")
        noise = torch.randn_like(table)
        with pytest.raises((RuntimeError, NotImplementedError)):
            bool(table.sum() > 0)
    assert torch.equal(written, torch.ones(2, 2)) and noise.is_meta
    assert torch.equal(torch.get_rng_state(), state)
    assert all(t.is_meta for t in (conv.weight, linear.bias, embedding.weight, plain))
    # Only fills are skipped, and only on meta tensors; outside the context nothing changes.
    real = torch.zeros(2, 2)
    with shapes_only():
        real.fill_(3.0)
    assert torch.equal(real, torch.full((2, 2), 3.0))
    assert not nn.Linear(2, 2).weight.is_meta


def _loads_without_compiler(checkpoint: Path, allowed: tuple[str, ...] = ()) -> None:
    result = subprocess.run(
        [sys.executable, "-c", LOAD, str(checkpoint), *HEAVY],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    imported = result.stdout.strip().splitlines()[-1].split()[1:]
    assert set(imported) <= set(allowed), imported


def test_an_act_checkpoint_loads_without_the_compiler(tmp_path: Path) -> None:
    from policies.act.demo import make_demo_checkpoint

    _loads_without_compiler(make_demo_checkpoint(tmp_path / "act", seed=0))


def test_a_tdmpc2_checkpoint_loads_without_the_compiler(tmp_path: Path) -> None:
    from policies.tdmpc2.demo import make_demo_tdmpc2_checkpoint

    # Its planner's norm kernels are its own (their Triton op, on a GPU, still imports inductor).
    allowed = ("policies.tdmpc2.norm_kernels",)
    _loads_without_compiler(make_demo_tdmpc2_checkpoint(tmp_path / "tdmpc2", seed=0), allowed)


def test_a_flow_checkpoint_loads_without_the_compiler(tmp_path: Path) -> None:
    from policies.checkpoints.tempo_format import save_checkpoint
    from policies.flow.demo import make_demo_flow_policy

    _loads_without_compiler(save_checkpoint(tmp_path / "flow", make_demo_flow_policy(seed=0)))


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_lerobots_saved_pi0_checkpoints_load_without_the_compiler(family: str) -> None:
    _loads_without_compiler(Path(__file__).resolve().parents[1] / "data" / f"{family}_lerobot_tiny")
