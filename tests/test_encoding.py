"""skbert._text.encoding: padding-free prediction blocks of fixed shape (row_blocks,
stack_rows), tokenizing, padding (pad_rows, pad_features) and whole-text windows."""

import numpy as np
import pytest

from skbert._text.encoding import row_blocks, stack_rows


def random_lengths(seed, n=200, high=600):
    rng = np.random.default_rng(seed)  # some rows longer than a small block's budget
    return rng.integers(1, high, size=n)


def check_blocks(lengths, block_tokens):
    lengths = np.asarray(lengths)
    blocks = list(row_blocks(lengths, block_tokens))
    # every row exactly once among the real rows; the rest repeat rows of their own block
    real = [positions[:n_real] for positions, n_real in blocks]
    seen = np.concatenate(real) if real else np.array([], dtype=np.int64)
    np.testing.assert_array_equal(np.sort(seen), np.arange(len(lengths)))
    widths = []
    for positions, n_real in blocks:
        assert isinstance(positions, np.ndarray) and np.issubdtype(positions.dtype, np.integer)
        assert 1 <= n_real <= len(positions)
        assert set(positions[n_real:].tolist()) <= set(positions[:n_real].tolist())
        block_lengths = np.unique(lengths[positions])
        assert len(block_lengths) == 1, block_lengths  # one length: no padding
        width = int(block_lengths[0])
        # the shape is a function of the length alone: the budget's worth of rows, or one
        assert len(positions) == max(1, block_tokens // width)
        widths.append(width)
    assert widths == sorted(widths, reverse=True)  # longest rows first
    # only the last block of a length has repeats
    for width in set(widths):
        n_reals = [n for (p, n), w in zip(blocks, widths, strict=True) if w == width]
        full = max(1, block_tokens // width)
        assert all(n == full for n in n_reals[:-1]) and 1 <= n_reals[-1] <= full
    return blocks


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("block_tokens", [1, 32, 96, 256, 1024])
def test_row_blocks_properties(seed, block_tokens):
    check_blocks(random_lengths(seed), block_tokens)


def test_row_blocks_few_distinct_lengths():
    lengths = [5, 7, 5, 5, 7, 3, 5, 5] * 10
    blocks = check_blocks(lengths, block_tokens=32)  # 6 rows of 5, 4 of 7, 10 of 3
    assert [len(p) for p, _ in blocks] == [4] * 5 + [6] * 9 + [10]
    assert [n for _, n in blocks] == [4] * 5 + [6] * 8 + [2] + [10]
    positions, n_real = blocks[13]  # the last 2 rows of length 5, each repeated
    assert n_real == 2
    np.testing.assert_array_equal(positions, np.resize(positions[:2], 6))


def test_row_blocks_rows_longer_than_the_budget_go_alone():
    budget = 64
    lengths = [budget + 5, 3, budget + 5, budget * 3]
    blocks = check_blocks(lengths, block_tokens=budget)
    assert [(p.tolist(), n) for p, n in blocks[:3]] == [([3], 1), ([0], 1), ([2], 1)]
    assert blocks[3][0].tolist() == [1] * (budget // 3) and blocks[3][1] == 1


def test_row_blocks_a_block_shape_does_not_depend_on_the_other_rows():
    # a row gets a block of the same shape alone, among equals, or among others
    alone = list(row_blocks([7], 64))
    among = list(row_blocks([7, 7, 7, 30, 2], 64))
    assert [len(p) for p, _ in alone] == [9]
    assert {len(p) for p, _ in among if len(set(np.asarray([7, 7, 7, 30, 2])[p])) == 1} >= {9}


@pytest.mark.parametrize("empty", [[], np.array([], dtype=np.int64)])
def test_row_blocks_empty_input_yields_nothing(empty):
    assert list(row_blocks(empty, 8)) == []


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
    for positions, _ in row_blocks(lengths, block_tokens=128):
        input_ids, token_types = stack_rows([rows[i] for i in positions])
        assert input_ids.shape == token_types.shape == (len(positions), lengths[positions[0]])
        np.testing.assert_array_equal(input_ids[-1], rows[positions[-1]][0])


TRICKY = [
    "Hello, world!",
    "  leading and trailing  ",
    "",
    "naïve café façade — «quotes» and emoji 🙂",
    "[CLS] special tokens [SEP] written as text [MASK]",
    "numbers 3.14159 and URLs https://example.org/a?b=c",
    "汉字 and ひらがな mixed with latin",
    "a" * 300,
]


def test_fast_path_tokenizes_as_the_tokenizer_does(packaged_model, data_home):
    from transformers import AutoTokenizer

    from skbert._text.encoding import plain_backend, token_ids
    from skbert.datasets import load_sst2

    tokenizer = AutoTokenizer.from_pretrained(packaged_model)
    assert plain_backend(tokenizer) is not None  # the fast path is the one tested
    texts = [str(t) for t in load_sst2("dev", data_home=data_home, return_X_y=True)[0]]
    texts += TRICKY
    expected = tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert token_ids(tokenizer, texts, block=100) == expected


@pytest.mark.parametrize("setting", ["false", "0", "OFF"])
def test_blocks_are_tokenized_in_threads_when_the_tokenizer_runs_serially(
    packaged_model, data_home, monkeypatch, setting
):
    """With the Rust tokenizer's parallelism off, blocks go to torch's thread count of
    threads, in order, with the ids of the tokenizer's own call; with it on (the default),
    the tokenizer parallelizes each block and skbert calls it from one thread."""
    import threading

    import torch
    from transformers import AutoTokenizer

    import skbert._text.encoding as encoding
    from skbert.datasets import load_sst2

    tokenizer = AutoTokenizer.from_pretrained(packaged_model)
    texts = [str(t) for t in load_sst2("dev", data_home=data_home, return_X_y=True)[0]]
    expected = tokenizer(texts, add_special_tokens=False)["input_ids"]
    backend = encoding.plain_backend(tokenizer)
    callers = []

    class Spy:
        def encode_batch_fast(self, part, **kwargs):
            callers.append(threading.current_thread().name)
            return backend.encode_batch_fast(part, **kwargs)

    monkeypatch.setattr(encoding, "plain_backend", lambda tokenizer: Spy())
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
        assert encoding.tokenizing_threads() == 1
        assert encoding.token_ids(tokenizer, texts, block=50) == expected
        assert set(callers) == {threading.current_thread().name}
        callers.clear()
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", setting)
        assert encoding.tokenizing_threads() == 2
        assert encoding.token_ids(tokenizer, texts, block=50) == expected
        assert all(name.startswith("skbert-tokenize") for name in callers)
        assert len(callers) == -(-len(texts) // 50)
    finally:
        torch.set_num_threads(threads)


def test_a_truncation_set_on_the_backend_does_not_apply(tiny_bert):
    from transformers import AutoTokenizer

    from skbert._text.encoding import plain_backend, token_ids

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    tokenizer.backend_tokenizer.enable_truncation(3)  # as a tokenizer.json may set
    assert plain_backend(tokenizer) is not None
    texts = ["the cat sat on the mat and the dog", "good film"]
    assert [len(ids) for ids in token_ids(tokenizer, texts)] == [9, 2]
    assert token_ids(tokenizer, texts) == tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert tokenizer.backend_tokenizer.truncation is None  # turned off by that call


def test_special_tokens_in_a_text_are_read_as_the_tokenizer_reads_them(tiny_bert, tmp_path):
    """A checkpoint whose tokenizer sets split_special_tokens reads "[SEP]" in a text as
    text; the backend's copy read it as the separator (its flag is not copied)."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from skbert._text.encoding import token_ids

    texts = ["the cat [SEP] sat [MASK] on the mat", "[CLS] good film"]
    for split in (False, True):
        folder = tmp_path / f"split-{split}"
        shutil.copytree(tiny_bert, folder)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(
            json.dumps({**config, "split_special_tokens": split})
        )
        tokenizer = AutoTokenizer.from_pretrained(folder)
        expected = tokenizer(texts, add_special_tokens=False)["input_ids"]
        assert token_ids(tokenizer, texts) == expected
        specials = {tokenizer.sep_token_id, tokenizer.mask_token_id, tokenizer.cls_token_id}
        assert bool(specials & {i for ids in expected for i in ids}) is not split


@pytest.mark.parametrize("enabled_before", [True, False])
def test_encoding_pauses_the_garbage_collector_and_restores_it(tiny_bert, enabled_before):
    import gc

    from transformers import AutoTokenizer

    from skbert._nn.backbone import SpecialTokens
    from skbert._nn.readout import Readout
    from skbert._text.encoding import encode_texts

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    specials = SpecialTokens.from_tokenizer(tokenizer)
    seen = []

    class Spy:  # a readout that records whether the collector runs while texts are cut
        def __getattr__(self, name):
            seen.append(gc.isenabled())
            return getattr(readout, name)

    readout = Readout(
        truncation="head",
        max_length=16,
        head_length=8,
        max_chunks=None,
        chunk_pooling="mean",
        layers=(2,),
        layer_combine="concat",
        pooling="mean",
        hidden_size=16,
        n_hidden_states=3,
    )
    (gc.enable if enabled_before else gc.disable)()
    try:
        encoded = encode_texts(tokenizer, specials, ["the cat sat", "good"], readout=Spy())
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable()
    assert len(encoded) == 2
    assert seen and not any(seen)


def test_pad_rows_pads_right_or_left_with_the_fill():
    from skbert._text.encoding import pad_rows

    rows = [[5, 6, 7], [8], []]
    np.testing.assert_array_equal(pad_rows(rows, 4, 0), [[5, 6, 7, 0], [8, 0, 0, 0], [0] * 4])
    left = pad_rows(rows, 3, 9, left=True)
    np.testing.assert_array_equal(left, [[5, 6, 7], [9, 9, 8], [9, 9, 9]])
    assert left.dtype == np.int64
    spans = pad_rows([[(0, 3), (4, 5)], [(1, 2)]], 2, (0, 0), left=True)
    assert spans.shape == (2, 2, 2)
    np.testing.assert_array_equal(spans[1], [[0, 0], [1, 2]])


def test_pad_features_fills_each_feature_as_padding_needs():
    from skbert._text.encoding import pad_features

    rows = [
        {"input_ids": [2, 7, 3], "special_tokens_mask": [1, 0, 1], "word_ids": [-1, 0, -1]},
        {"input_ids": [2, 3], "special_tokens_mask": [1, 1], "word_ids": [-1, -1]},
    ]
    padded = pad_features(rows, pad_id=0)
    assert set(padded) == set(rows[0])
    np.testing.assert_array_equal(padded["input_ids"], [[2, 7, 3], [2, 3, 0]])
    np.testing.assert_array_equal(padded["special_tokens_mask"], [[1, 0, 1], [1, 1, 1]])
    np.testing.assert_array_equal(padded["word_ids"], [[-1, 0, -1], [-1, -1, -1]])
    left = pad_features(rows, pad_id=0, left=True)
    np.testing.assert_array_equal(left["input_ids"], [[2, 7, 3], [0, 2, 3]])


def test_text_windows_are_the_chunks_with_special_tokens(tiny_bert):
    from transformers import AutoTokenizer

    from skbert._nn.backbone import SpecialTokens
    from skbert._text.encoding import text_windows
    from skbert.truncation import split_chunks

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    specials = SpecialTokens.from_tokenizer(tokenizer)
    ids = list(range(10, 17))
    words = [0, 0, 1, 2, 2, 2, 3]
    windows = text_windows(ids, 3, specials, words)
    assert [w["input_ids"] for w in windows] == [
        specials.build(chunk)[0] for chunk in split_chunks(ids, 3)
    ]
    assert windows[-1]["special_tokens_mask"] == [1, 0, 1]
    assert [w["word_ids"] for w in windows] == [[-1, 0, 0, 1, -1], [-1, 2, 2, 2, -1], [-1, 3, -1]]
    assert all(w["attention_mask"] == [1] * len(w["input_ids"]) for w in windows)
    assert "word_ids" not in text_windows(ids, 3, specials)[0]
    assert text_windows([], 3, specials) == []  # no token, no window (chunks give one)


@pytest.mark.parametrize(("name", "n_pair"), [("tiny_bert", 3), ("tiny_roberta", 4)])
def test_pairs_need_room_for_a_token_of_each_sentence(request, name, n_pair):
    """A max_length at or under a pair's special tokens left a negative budget: rows longer
    than max_length (and an IndexError on long pairs). It is refused, naming the minimum."""
    from skbert import BertSentenceTransformer

    model = request.getfixturevalue(name)
    pair = [["the cat sat on the mat", "a dog sat on the cat"]]
    with pytest.raises(ValueError, match=rf"max_length=4 .* use max_length >= {n_pair + 2}"):
        BertSentenceTransformer(model, max_length=4).fit(pair).transform(pair)
    vectors = BertSentenceTransformer(model, max_length=n_pair + 2).fit(pair).transform(pair)
    assert np.isfinite(vectors).all()
