"""A robot's task as token ids: openpi's framing (BOS, the cleaned text, "\\n" for pi0), padded
right with a mask, truncated to the limit, tokenized once per task; a tokenizer that does not fit
the checkpoint is refused with one sentence; pi0.5's state prompt from tables equals tokenizing
the whole string."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import CheckpointError
from policies.pi05_prompt import (
    StateTokenTable,
    discretize_state,
    pi05_prompt_text,
    pi05_prompt_tokens,
    pi05_reference_tokens,
)
from policies.prompt_tokens import PromptTokenizer
from tests.prompt_fixtures import VOCAB_SIZE, WORDS, train_tokenizer

BOS, PAD = 2, 0


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.model")


def test_a_task_is_bos_the_cleaned_text_and_a_newline_padded_right(model_file: Path) -> None:
    tokenizer = PromptTokenizer(model_file, 24, VOCAB_SIZE)
    ids, mask = tokenizer.encode("  pick_up the\nred cube \n")
    sp = tokenizer.processor
    expected = [BOS, *sp.encode("pick up the red cube"), *sp.encode("\n")]
    assert sp.encode("\n") == [sp.piece_to_id("\n")]  # its own token, as Gemma's
    assert ids.dtype == np.int64 and mask.dtype == np.bool_
    assert ids.shape == mask.shape == (24,)
    assert ids[: len(expected)].tolist() == expected
    assert mask.tolist() == [True] * len(expected) + [False] * (24 - len(expected))
    assert (ids[len(expected) :] == PAD).all()
    assert tokenizer.full_length("pick up the red cube") == len(expected)
    assert not tokenizer.truncated("pick up the red cube")


def test_a_long_task_keeps_its_first_ids(model_file: Path) -> None:
    full = PromptTokenizer(model_file, 200, VOCAB_SIZE)
    short = PromptTokenizer(model_file, 5, VOCAB_SIZE)
    task = "pick up the red cube and place it in the box"
    ids, mask = short.encode(task)
    assert ids.tolist() == full.encode(task).ids[:5].tolist() and mask.all()
    assert short.truncated(task) and short.full_length(task) == full.encode(task).length


def test_a_task_is_tokenized_once_and_shared_read_only(model_file: Path) -> None:
    tokenizer = PromptTokenizer(model_file, 16, VOCAB_SIZE)
    first = tokenizer.encode("open the drawer")
    for _ in range(3):
        assert tokenizer.encode("open the drawer") is first
    tokenizer.encode("close the door")
    assert tokenizer.tokenized == 2
    with pytest.raises(ValueError):
        first.ids[0] = 7


def test_a_tokenizer_of_another_vocabulary_is_refused_naming_both_sizes(model_file: Path) -> None:
    with pytest.raises(CheckpointError) as refused:
        PromptTokenizer(model_file, 16, 257_152)
    message = str(refused.value)
    assert f"vocabulary of {VOCAB_SIZE} tokens" in message and "257152" in message
    assert "\n" not in message


def test_a_missing_tokenizer_file_is_refused_naming_the_spec_field(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"prompt\.tokenizer") as refused:
        PromptTokenizer(tmp_path / "absent.model", 16, VOCAB_SIZE)
    assert "absent.model" in str(refused.value)


def test_a_file_that_is_no_sentencepiece_model_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "tokenizer.model"
    junk.write_bytes(b"not a model at all" * 10)
    with pytest.raises(CheckpointError, match="is not a SentencePiece model"):
        PromptTokenizer(junk, 16, VOCAB_SIZE)


def test_pi05s_task_part_is_bos_and_task_state(model_file: Path) -> None:
    tokenizer = PromptTokenizer(model_file, 64, VOCAB_SIZE, template="pi05")
    tokens = tokenizer.encode("fold_towel")
    expected = [BOS, *tokenizer.processor.encode("Task: fold towel, State:")]
    assert tokens.ids[: tokens.length].tolist() == expected


def test_state_bins_are_openpis() -> None:
    state = np.array([-1.5, -1.0, -0.999, 0.0, 0.5, 0.9999, 1.0, 3.0])
    expected = np.digitize(state, bins=np.linspace(-1, 1, 257)[:-1]) - 1
    assert discretize_state(state).tolist() == expected.tolist()
    assert discretize_state(state).tolist() == [-1, 0, 0, 128, 192, 255, 255, 255]
    assert pi05_prompt_text(" a_b\n", np.array([0.0, -1.0])) == "Task: a b, State: 128 0;\nAction: "


tasks = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)
states = st.integers(1, 32).flatmap(
    lambda n: st.lists(st.floats(-1.3, 1.3, allow_nan=False), min_size=n, max_size=n)
)


@pytest.mark.parametrize("across_spaces", [False, True])
def test_pi05_tokens_from_tables_equal_the_whole_string_tokenized(
    tmp_path_factory: pytest.TempPathFactory, model_file: Path, across_spaces: bool
) -> None:
    path = model_file
    if across_spaces:  # unlike Gemma's: pieces such as ":▁12" or "0▁5" span a space
        path = train_tokenizer(
            tmp_path_factory.mktemp("tok2") / "t.model",
            split_by_whitespace=False,
            split_digits=False,
        )
    tokenizer = PromptTokenizer(path, 256, VOCAB_SIZE, template="pi05")
    table = StateTokenTable(tokenizer.processor)
    # Gemma's settings: the tables; pieces across spaces: found out, the whole string per call.
    assert table.composes is not across_spaces

    @settings(max_examples=300, deadline=None)
    @given(tasks, states, st.sampled_from([12, 40, 256]))
    def same(task: str, state: list[float], max_length: int) -> None:
        vector = np.asarray(state, np.float32)
        got = pi05_prompt_tokens(table, tokenizer.encode(task), vector, max_length)
        want = pi05_reference_tokens(tokenizer.processor, task, vector, max_length)
        assert got.ids.tolist() == want.ids.tolist()
        assert got.mask.tolist() == want.mask.tolist()
        if table.composes:  # as served: the task part comes cut to the same max_length
            cut = PromptTokenizer(path, max_length, VOCAB_SIZE, template="pi05").encode(task)
            got = pi05_prompt_tokens(table, cut, vector, max_length)
            assert got.ids.tolist() == want.ids.tolist()

    same()


def test_pi05_tokens_for_many_random_states(model_file: Path) -> None:
    tokenizer = PromptTokenizer(model_file, 200, VOCAB_SIZE, template="pi05")
    table = StateTokenTable(tokenizer.processor)
    rng = np.random.default_rng(5)
    task = "stack the green cups on the left"
    prefix = tokenizer.encode(task)
    for _ in range(2000):
        state = rng.uniform(-1.1, 1.1, int(rng.integers(1, 33))).astype(np.float32)
        got = pi05_prompt_tokens(table, prefix, state, 200)
        want = pi05_reference_tokens(tokenizer.processor, task, state, 200)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_array_equal(got.mask, want.mask)
