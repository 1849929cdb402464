import pytest

from skbert.truncation import split_chunks, truncate, truncate_pair

IDS = list(range(10))


def test_short_text_is_untouched():
    for strategy in ("head", "tail", "head+tail"):
        assert truncate(IDS, 10, strategy) == IDS


def test_head_tail_and_head_plus_tail():
    assert truncate(IDS, 4, "head") == [0, 1, 2, 3]
    assert truncate(IDS, 4, "tail") == [6, 7, 8, 9]
    assert truncate(IDS, 5, "head+tail", head_length=2) == [0, 1, 7, 8, 9]


def test_head_plus_tail_with_head_as_long_as_budget_is_head():
    assert truncate(IDS, 3, "head+tail", head_length=3) == [0, 1, 2]


def test_unknown_strategy():
    with pytest.raises(ValueError, match="allowed: 'head', 'tail', 'head\\+tail'"):
        truncate(IDS, 3, "chunks")
    with pytest.raises(ValueError, match="strategy='bogus'"):
        truncate(IDS[:2], 3, "bogus")  # a text that fits is no excuse


def test_negative_budgets_and_lengths_are_refused():
    """head_length=-2 returned 14 ids of a 10-id text, repeated; budget=-3 returned 7."""
    with pytest.raises(ValueError, match="head_length=-2 is negative"):
        truncate(IDS, 4, "head+tail", head_length=-2)
    with pytest.raises(ValueError, match="budget=-3 is negative"):
        truncate(IDS, -3, "head")
    assert truncate(IDS, 0, "tail") == []
    for budget, max_chunks in ((0, None), (4, 0), (4, -1)):  # [] or a window silently dropped
        with pytest.raises(ValueError, match=f"budget={budget} and max_chunks={max_chunks}"):
            split_chunks(IDS, budget, max_chunks)


def test_chunks_cover_the_whole_text_in_order():
    chunks = split_chunks(IDS, 4)
    assert chunks == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert split_chunks(IDS, 4, max_chunks=2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split_chunks([], 4) == [[]]


def test_pair_keeps_short_side_whole():
    a, b = truncate_pair([1, 2], list(range(10, 30)), 8, "head")
    assert a == [1, 2] and b == list(range(10, 16))
    a, b = truncate_pair(list(range(10, 30)), [1, 2], 8, "tail")
    assert a == list(range(24, 30)) and b == [1, 2]


def test_pair_halves_budget_when_both_long():
    a, b = truncate_pair(list(range(20)), list(range(100, 120)), 9, "head")
    assert len(a) + len(b) == 9 and len(a) == 4 and len(b) == 5  # a tie: the second's
    a, b = truncate_pair(list(range(20)), list(range(100, 110)), 9, "head")
    assert len(a) == 5 and len(b) == 4  # the odd token goes to the longer side


def test_pair_lengths_are_hugging_faces_longest_first(tiny_bert):
    # the odd token of an odd budget went to the first side, where HF gives it to the longer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    words = "the cat sat on the mat and the dog was not good".split()
    for n_first in range(1, 12):
        for n_second in range(1, 12):
            first, second = " ".join(words[:n_first]), " ".join(words[-n_second:])
            ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in (first, second)]
            for max_length in range(5, 20):
                hf = tokenizer(first, second, truncation="longest_first", max_length=max_length)
                kept = truncate_pair(*ids, max_length - 3, "head")
                types = hf["token_type_ids"]
                assert [len(k) for k in kept] == [types.count(0) - 2, types.count(1) - 1]
                cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
                assert hf["input_ids"] == [cls, *kept[0], sep, *kept[1], sep]


def test_pair_that_fits_is_untouched():
    assert truncate_pair([1], [2], 5, "head") == ([1], [2])


def test_pair_head_plus_tail_keeps_the_proportion_of_head_in_each_side():
    # head_length=128 of a budget of 253 (max_length=256 less 3 specials): each side keeps
    # that share of head tokens (it kept its head only: 126 and 127 tokens, no tail)
    first, second = list(range(300)), list(range(1000, 1300))
    a, b = truncate_pair(first, second, 253, "head+tail")
    assert a == first[:63] + first[-63:]  # 128 * 126 // 253 = 63 of its 126
    assert b == second[:64] + second[-63:]  # 128 * 127 // 253 = 64 of its 127
    # a short side is kept whole; the long one keeps the proportion of its share
    a, b = truncate_pair(list(range(10)), second, 30, "head+tail", head_length=12)
    assert a == list(range(10)) and b == second[:8] + second[-12:]  # 12 * 20 // 30 = 8
    assert truncate_pair([], [], 0, "head+tail") == ([], [])
    assert truncate_pair([1], [2], 0, "head+tail") == ([], [])


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((10, "head_tail", 128), ValueError, "strategy='head_tail'"),
        ((10, "chunks", 128), ValueError, "strategy='chunks'"),
        ((10, "head+tail", -1), ValueError, "head_length=-1 is negative"),
        ((True, "head", 128), TypeError, "budget=True"),
        ((-3, "head", 128), ValueError, "budget=-3 is negative"),
    ],
)
def test_pair_arguments_are_checked_whether_or_not_the_pair_fits(args, error, message):
    budget, strategy, head_length = args
    for first, second in (([1], [2]), (list(range(20)), list(range(20)))):
        with pytest.raises(error, match=message):
            truncate_pair(first, second, budget, strategy, head_length)
