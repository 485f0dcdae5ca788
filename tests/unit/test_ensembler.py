"""ChunkEnsembler against a plain transcription of ACT's temporal ensembling (Algorithm 2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.action.ensembler import ChunkEnsembler


class ActReference:
    """ACT's Algorithm 2, as plainly as possible: all_time_actions[start_step, step] holds the
    prediction made at start_step for step; the action for step t is the exp(-k * i)-weighted
    mean of the column's populated rows, i = 0 for the oldest. Memory grows with the episode.

    Two deliberate differences from the paper's code: a populated mask instead of "row != 0"
    (an action of exactly 0 is a real action), and rows for steps before `current_step` are not
    stored (late). order="arrival" ranks rows by arrival instead of by start_step, which is what
    the ensembler does for chunks that arrive out of order; in order, the two are the same.
    Mode "newest" plays the populated row with the highest start_step (ties: later arrival).
    """

    def __init__(self, max_steps: int, chunk_size: int, action_dim: int, k: float, order: str):
        self.k = k
        self.order = order
        self.chunk_size = chunk_size
        self.all_time_actions = np.zeros((max_steps, max_steps + chunk_size, action_dim))
        self.populated = np.zeros((max_steps, max_steps + chunk_size), dtype=bool)
        self.arrival = np.full(max_steps, -1)
        self.arrived = 0

    def add(self, start_step: int, chunk: np.ndarray, current_step: int) -> None:
        for i in range(self.chunk_size):
            t = start_step + i
            if t >= current_step:
                self.all_time_actions[start_step, t] = chunk[i]
                self.populated[start_step, t] = True
        self.arrival[start_step] = self.arrived
        self.arrived += 1

    def temporal(self, t: int) -> np.ndarray | None:
        rows = np.flatnonzero(self.populated[:, t])
        if len(rows) == 0:
            return None
        if self.order == "arrival":
            rows = rows[np.argsort(self.arrival[rows])]
        actions_for_curr_step = self.all_time_actions[rows, t]
        exp_weights = np.exp(-self.k * np.arange(len(actions_for_curr_step)))
        exp_weights = exp_weights / exp_weights.sum()
        return (actions_for_curr_step * exp_weights[:, None]).sum(axis=0)

    def newest(self, t: int) -> np.ndarray | None:
        rows = np.flatnonzero(self.populated[:, t])
        if len(rows) == 0:
            return None
        return self.all_time_actions[rows.max(), t]


@st.composite
def episodes(draw, in_order: bool):
    """A random episode: chunks from observations at irregular steps (query period > 1, skipped
    steps), landing after random latencies (late chunks), some queries skipped."""
    chunk_size = draw(st.integers(1, 12))
    action_dim = draw(st.integers(1, 3))
    ticks = draw(st.integers(1, 45))
    gaps = draw(st.lists(st.integers(1, 8), min_size=1, max_size=30))
    latencies = draw(
        st.lists(st.integers(0, chunk_size + 3), min_size=len(gaps), max_size=len(gaps))
    )
    starts, arrivals = [], []
    start = draw(st.integers(0, 3))
    for gap, latency in zip(gaps, latencies, strict=True):
        if start >= ticks:
            break
        arrival = start + latency
        if in_order and arrivals:
            arrival = max(arrival, arrivals[-1])
        starts.append(start)
        arrivals.append(arrival)
        start += gap
    order = list(range(len(starts)))
    if not in_order:
        order = draw(st.permutations(order))
    queried = draw(st.lists(st.booleans(), min_size=ticks, max_size=ticks))
    seed = draw(st.integers(0, 2**32 - 1))
    return chunk_size, action_dim, ticks, starts, arrivals, order, queried, seed


def run_episode(episode, mode: str, k: float, order: str) -> int:
    chunk_size, action_dim, ticks, starts, arrivals, order_idx, queried, seed = episode
    rng = np.random.default_rng(seed)
    chunks = rng.normal(size=(len(starts), chunk_size, action_dim))
    ens = ChunkEnsembler(chunk_size, action_dim, mode=mode, k=k)
    ref = ActReference(ticks + 20, chunk_size, action_dim, k, order)
    out = np.zeros(action_dim)
    compared = 0
    for t in range(ticks):
        for j in order_idx:  # same-tick arrivals in this order
            if arrivals[j] == t:
                dropped = ens.add_chunk(starts[j], chunks[j], current_step=t)
                assert dropped == min(chunk_size, max(0, t - starts[j]))
                ref.add(starts[j], chunks[j], current_step=t)
        if not queried[t]:
            continue
        expected = ref.temporal(t) if mode == "temporal" else ref.newest(t)
        out.fill(123.0)
        got = ens.action_at(t, out)
        if expected is None:
            assert not got
            assert (out == 123.0).all(), "out must be untouched when no chunk covers the step"
        else:
            assert got
            np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
            compared += 1
    return compared


K_VALUES = st.sampled_from([0.0, 0.01, -0.5, 1.0])


@settings(max_examples=300, deadline=None)
@given(episode=episodes(in_order=True), k=K_VALUES)
def test_temporal_equals_act_reference(episode, k):
    run_episode(episode, "temporal", k, order="start")


@settings(max_examples=150, deadline=None)
@given(episode=episodes(in_order=False), k=K_VALUES)
def test_out_of_order_chunks_are_merged_ranked_by_arrival(episode, k):
    run_episode(episode, "temporal", k, order="arrival")


@settings(max_examples=100, deadline=None)
@given(episode=episodes(in_order=False))
def test_out_of_order_with_uniform_weights_equals_act_reference(episode):
    # With k = 0 the rank does not matter: exactly ACT's table, whatever the arrival order.
    run_episode(episode, "temporal", 0.0, order="start")


@settings(max_examples=200, deadline=None)
@given(episode=episodes(in_order=False))
def test_newest_mode_plays_highest_start_step(episode):
    run_episode(episode, "newest", 0.0, order="start")


def test_reference_is_exercised():
    # A fixed dense episode: chunk every 2 steps, latency 3, every step queried.
    starts = list(range(0, 40, 2))
    episode = (10, 2, 40, starts, [s + 3 for s in starts], list(range(20)), [True] * 40, 7)
    assert run_episode(episode, "temporal", 0.01, order="start") == 37


def test_weights_favour_oldest_by_default_and_newest_with_negative_k():
    chunk_a = np.zeros((4, 1))
    chunk_b = np.ones((4, 1))
    out = np.zeros(1)
    for k, expected in [(0.0, 0.5), (1.0, 1 / (1 + np.e)), (-1.0, np.e / (1 + np.e))]:
        ens = ChunkEnsembler(4, 1, k=k)
        ens.add_chunk(0, chunk_a, current_step=0)
        ens.add_chunk(1, chunk_b, current_step=1)
        assert ens.action_at(2, out)
        assert out[0] == pytest.approx(expected)


def test_extreme_negative_k_stays_finite():
    size = 1000
    ens = ChunkEnsembler(size, 2, k=-10.0)
    rng = np.random.default_rng(0)
    out = np.zeros(2)
    last = None
    for t in range(size):
        last = rng.normal(size=(size, 2))
        ens.add_chunk(t, last, current_step=t)
        assert ens.action_at(t, out)
    # exp(10 * 999) overflows; scaled sums do not, and the newest prediction dominates.
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, last[0], atol=1e-3)


def test_uncovered_steps_return_false_and_leave_out_untouched():
    ens = ChunkEnsembler(5, 2)
    out = np.full(2, 7.0)
    assert not ens.action_at(0, out)
    ens.add_chunk(10, np.ones((5, 2)), current_step=10)
    assert not ens.action_at(9, out)  # before the present (10): gone
    assert ens.action_at(12, out)
    assert not ens.action_at(15, out)  # past the chunk
    ens2 = ChunkEnsembler(5, 2)
    ens2.add_chunk(3, np.ones((5, 2)), current_step=3)
    out.fill(7.0)
    assert not ens2.action_at(2, out)
    assert (out == 7.0).all()


def test_late_elements_are_dropped_and_counted():
    ens = ChunkEnsembler(5, 1)
    chunk = np.arange(5.0)[:, None]
    assert ens.add_chunk(0, chunk, current_step=3) == 3
    out = np.zeros(1)
    assert not ens.action_at(2, out)
    assert ens.action_at(3, out) and out[0] == 3.0
    assert ens.add_chunk(0, chunk, current_step=9) == 5  # entirely late: nothing stored
    assert not ens.action_at(9, out)


def test_horizon_end():
    ens = ChunkEnsembler(5, 1)
    assert ens.horizon_end == 0
    ens.add_chunk(10, np.zeros((5, 1)), current_step=12)
    assert ens.horizon_end == 15
    ens.add_chunk(14, np.zeros((5, 1)), current_step=14)
    assert ens.horizon_end == 19
    out = np.zeros(1)
    ens.action_at(25, out)
    assert ens.horizon_end == 25


def test_memory_does_not_grow_with_episode_length():
    size, dim = 100, 14
    ens = ChunkEnsembler(size, dim)
    shapes = {name: value.shape for name, value in vars(ens).items() if hasattr(value, "shape")}
    nbytes = ens.nbytes
    chunk = np.random.default_rng(1).normal(size=(size, dim))
    out = np.zeros(dim)
    for t in range(10_000):
        if t % 3 == 0:
            ens.add_chunk(max(0, t - 2), chunk, current_step=t)
        assert ens.action_at(t, out)
    after = {name: value.shape for name, value in vars(ens).items() if hasattr(value, "shape")}
    assert after == shapes
    assert ens.nbytes == nbytes
    assert nbytes < 8 * size * dim * 8  # O(chunk_size * action_dim), a handful of buffers


def test_reset_forgets_everything_and_restarts_time():
    ens = ChunkEnsembler(5, 1)
    out = np.zeros(1)
    ens.add_chunk(100, np.ones((5, 1)), current_step=100)
    assert ens.action_at(101, out)
    ens.reset()
    assert ens.horizon_end == 0
    assert not ens.action_at(101, out)
    ens.reset()
    ens.add_chunk(0, np.full((5, 1), 2.0), current_step=0)  # a new episode from step 0
    assert ens.action_at(0, out) and out[0] == 2.0


def test_bad_chunks_are_refused_and_store_nothing():
    ens = ChunkEnsembler(3, 2)
    with pytest.raises(ValueError, match="shape"):
        ens.add_chunk(0, np.zeros((3, 3)), current_step=0)
    bad = np.zeros((3, 2))
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ens.add_chunk(0, bad, current_step=0)
    with pytest.raises(ValueError, match="after current_step"):
        ens.add_chunk(10, np.zeros((3, 2)), current_step=0)
    assert not ens.action_at(0, np.zeros(2))
    with pytest.raises(ValueError, match="mode"):
        ChunkEnsembler(3, 2, mode="median")  # type: ignore[arg-type]


def test_future_start_within_horizon_keeps_current_steps():
    # A chunk up to chunk_size ahead must not overwrite steps still due from an older chunk.
    ens = ChunkEnsembler(4, 1, mode="newest")
    ens.add_chunk(0, np.zeros((4, 1)), current_step=0)
    ens.add_chunk(4, np.ones((4, 1)), current_step=0)
    out = np.zeros(1)
    for t in range(8):
        assert ens.action_at(t, out)
        assert out[0] == (0.0 if t < 4 else 1.0)


def test_newest_mode_same_start_step_later_chunk_wins():
    ens = ChunkEnsembler(3, 1, mode="newest")
    ens.add_chunk(5, np.zeros((3, 1)), current_step=5)
    ens.add_chunk(5, np.ones((3, 1)), current_step=5)
    ens.add_chunk(4, np.full((3, 1), 2.0), current_step=5)  # older start: loses where covered
    out = np.zeros(1)
    assert ens.action_at(5, out) and out[0] == 1.0
    assert ens.action_at(6, out) and out[0] == 1.0
