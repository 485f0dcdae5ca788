"""SmolVLA served from the `policy:` settings: the prompt's tokenizer from the checkpoint or
policy.prompt.tokenizer (one sentence when there is none), policy.rtc refused in one sentence,
the control side's tokenizer, and the CPU demo's policy."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.config import load_config
from controller.errors import CheckpointError, ConfigError
from policies.base import Plan, RobotContext
from policies.catalog import build_tensor_policy
from policies.demo_arm import HOME_POSE
from policies.inputs import example_frames
from policies.prompt_tokens import PromptTokenizer
from policies.tensor_policy import EagerPolicy

pytest.importorskip("tokenizers", reason="SmolVLA's tokenizer needs the tokenizers package")

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "smolvla_lerobot_tiny"


@pytest.fixture(autouse=True)
def _empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_hub_cache"))


def served(path: Path, *settings: str) -> Any:
    config = load_config(None, ["policy.kind=checkpoint", f"policy.path={path}", *settings])
    return build_tensor_policy(config.policy, config.robot)


def without_tokenizer(tmp_path: Path) -> Path:
    directory = tmp_path / "ckpt"
    shutil.copytree(REFERENCE, directory)
    (directory / "tokenizer.json").unlink()
    return directory


def test_a_checkpoint_without_a_tokenizer_is_refused_in_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="policy.prompt.tokenizer is unset") as caught:
        served(without_tokenizer(tmp_path))
    assert "\n" not in str(caught.value)


def test_policy_prompt_names_the_tokenizer_and_the_default_task(tmp_path: Path) -> None:
    directory = without_tokenizer(tmp_path)
    tokenizer = shutil.copyfile(REFERENCE / "tokenizer.json", tmp_path / "tokenizer.json")
    policy = served(
        directory, f"policy.prompt.tokenizer={tokenizer}", "policy.prompt.default_task=fold it"
    )
    prompt = policy.spec.prompt
    assert prompt is not None and prompt.template == "smolvla"
    assert Path(prompt.tokenizer) == Path(tokenizer).resolve()
    assert prompt.default_task == "fold it"


def test_a_missing_tokenizer_file_named_in_the_settings_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="is not a file"):
        served(REFERENCE, f"policy.prompt.tokenizer={tmp_path / 'none.json'}")


def test_mode_trained_is_refused_in_one_sentence() -> None:
    with pytest.raises(ConfigError, match="SmolVLA's are not") as caught:
        served(REFERENCE, "policy.rtc.mode=trained", "execution.ensemble=newest")
    assert "\n" not in str(caught.value)


def rtc_context(policy: Any, plan: Plan | None, delay: int) -> RobotContext:
    from policies.prompt_tokens import PromptTokenizer

    prompt = policy.spec.prompt
    tokenizer = PromptTokenizer(Path(prompt.tokenizer), prompt.max_length, 320, "smolvla")
    state = policy.inputs.example(3).state_history
    return RobotContext(
        step=8, episode_start=plan is None, state_history=state, previous_plan=plan,
        inference_delay=delay, prompt=tokenizer.encode("open the drawer"),
    )  # fmt: skip


@pytest.mark.parametrize("mode", ["exact", "stop_grad", "inpaint"])
def test_real_time_chunking_follows_the_previous_plan_and_is_plain_without_one(mode: str) -> None:
    plain = served(REFERENCE)
    guided = served(REFERENCE, f"policy.rtc.mode={mode}", "execution.ensemble=newest")
    assert [i.name for i in guided.inputs.inputs][-3:] == ["prefix", "prefix_len", "delay"]
    frames = example_frames(plain.spec, 1)
    fresh = EagerPolicy(plain).predict(frames, rtc_context(plain, None, 0)).actions
    unguided = EagerPolicy(guided).predict(frames, rtc_context(guided, None, 0)).actions
    assert np.abs(unguided - fresh).max() <= 1e-4 * np.abs(fresh).max()  # nothing to follow
    previous = fresh + 0.5  # another chunk, from the same step on
    plan = Plan(actions=previous, start_step=8)
    following = EagerPolicy(guided).predict(frames, rtc_context(guided, plan, 2)).actions
    # The delayed rows follow the previous plan far closer than an unguided chunk does.
    assert np.abs(following[:2] - previous[:2]).max() < 0.5 * np.abs(fresh[:2] - previous[:2]).max()


def test_the_control_side_tokenizes_as_lerobot_and_refuses_a_larger_vocabulary() -> None:
    tokenizer = PromptTokenizer(REFERENCE / "tokenizer.json", 12, 320, "smolvla")
    tokens = tokenizer.encode("open the drawer")
    with_newline = tokenizer.encode("open the drawer\n")  # LeRobot appends none then
    assert np.array_equal(tokens.ids, with_newline.ids)
    assert 1 < int(tokens.mask.sum()) <= 12 and tokens.ids[0] == tokenizer.encode("wave").ids[0]
    long = tokenizer.encode("stack the blue block on the green block " * 3)
    assert long.mask.all() and tokenizer.truncated("stack the blue block on the green block " * 3)
    with pytest.raises(CheckpointError, match="has .* tokens but the model's token table has 10"):
        PromptTokenizer(REFERENCE / "tokenizer.json", 12, 10, "smolvla")


def test_the_demo_serves_finite_actions_near_the_home_pose(tmp_path: Path) -> None:
    from policies.smolvla.demo import TASKS, demo_settings

    settings = demo_settings(tmp_path)
    policy = served(Path(settings[1].split("=", 1)[1]))
    prompt = policy.spec.prompt
    assert prompt is not None and prompt.default_task == TASKS[0]
    tokenizer = PromptTokenizer(
        Path(prompt.tokenizer), prompt.max_length, prompt.vocab_size, "smolvla"
    )
    context = policy.inputs.example(0)
    context = type(context)(
        step=0,
        episode_start=True,
        state_history=context.state_history,
        prompt=tokenizer.encode(TASKS[1]),
    )
    actions = EagerPolicy(policy).predict(example_frames(policy.spec, 0), context).actions
    home = np.array([HOME_POSE[i % len(HOME_POSE)] for i in range(actions.shape[1])])
    assert actions.shape == (20, 6) and np.isfinite(actions).all()
    assert np.abs(actions - home).max() < 0.5
