"""Padding-free inference batches: skbert._encoding.row_batches and stack_rows."""

import numpy as np
import pytest

from skbert._encoding import TOKENS_PER_TEXT, row_batches, stack_rows


def random_lengths(seed, n=200, high=None):
    rng = np.random.default_rng(seed)
    high = high or 4 * TOKENS_PER_TEXT * 8  # some rows longer than a small batch's budget
    return rng.integers(1, high, size=n)


def check_batches(lengths, batch_size):
    lengths = np.asarray(lengths)
    batches = list(row_batches(lengths, batch_size))
    budget = batch_size * TOKENS_PER_TEXT
    # every row exactly once
    seen = np.concatenate(batches) if batches else np.array([], dtype=np.int64)
    np.testing.assert_array_equal(np.sort(seen), np.arange(len(lengths)))
    widths = []
    for batch in batches:
        assert isinstance(batch, np.ndarray) and np.issubdtype(batch.dtype, np.integer)
        assert len(batch) >= 1
        batch_lengths = np.unique(lengths[batch])
        assert len(batch_lengths) == 1, batch_lengths  # one length: no padding
        width = int(batch_lengths[0])
        # within the token budget, unless one row alone is longer than it
        assert len(batch) * width <= budget or (len(batch) == 1 and width > budget)
        widths.append(width)
    assert widths == sorted(widths, reverse=True)  # longest rows first
    # batches are as full as the budget allows: only the last batch of a length is smaller
    for width in set(widths):
        sizes = [len(b) for b, w in zip(batches, widths, strict=True) if w == width]
        full = max(1, budget // width)
        assert all(size == full for size in sizes[:-1]) and 1 <= sizes[-1] <= full
    return batches


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("batch_size", [1, 3, 8, 32])
def test_row_batches_properties(seed, batch_size):
    check_batches(random_lengths(seed), batch_size)


def test_row_batches_few_distinct_lengths():
    lengths = [5, 7, 5, 5, 7, 3, 5, 5] * 10
    batches = check_batches(lengths, batch_size=1)  # budget 32: 6 rows of 5, 4 of 7, 10 of 3
    assert [len(b) for b in batches] == [4] * 5 + [6] * 8 + [2] + [10]


def test_row_batches_rows_longer_than_the_budget_go_alone():
    budget = 2 * TOKENS_PER_TEXT
    lengths = [budget + 5, 3, budget + 5, budget * 3]
    batches = check_batches(lengths, batch_size=2)
    assert [b.tolist() for b in batches[:3]] == [[3], [0], [2]]
    assert batches[3].tolist() == [1]


def test_row_batches_accepts_lists_and_single_rows():
    assert [b.tolist() for b in row_batches([4], 8)] == [[0]]
    assert [b.tolist() for b in row_batches(np.array([4, 4]), 8)] == [[0, 1]]


@pytest.mark.parametrize("empty", [[], np.array([], dtype=np.int64)])
def test_row_batches_empty_input_yields_nothing(empty):
    assert list(row_batches(empty, 8)) == []


def test_stack_rows_shapes_and_values():
    rows = [([2, 5, 7, 3], [0, 0, 0, 0]), ([2, 8, 3, 9], [0, 0, 1, 1]), ([2, 6, 6, 3], [0] * 4)]
    input_ids, token_types = stack_rows(rows)
    assert input_ids.shape == token_types.shape == (3, 4)
    assert input_ids.dtype == token_types.dtype == np.int64
    np.testing.assert_array_equal(input_ids, [r[0] for r in rows])
    np.testing.assert_array_equal(token_types, [r[1] for r in rows])


def test_stack_rows_of_the_batches_of_encoded_rows():
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 40, size=50)
    rows = [(rng.integers(5, 30, size=n).tolist(), [0] * n) for n in lengths]
    for batch in row_batches(lengths, batch_size=4):
        input_ids, token_types = stack_rows([rows[i] for i in batch])
        assert input_ids.shape == token_types.shape == (len(batch), lengths[batch[0]])
        np.testing.assert_array_equal(input_ids[-1], rows[batch[-1]][0])
