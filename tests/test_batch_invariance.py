"""A text's output never depends on the other texts of the call: transform(X)[i] equals
transform([X[i]])[0] bit for bit, with and without the feature cache, in any order, at any
batch_size and torch thread count (skbert._inference.predict.predict_rows and its fixed-shape
blocks).

On all-MiniLM-L6-v2 these checks failed before the blocks had a fixed shape: encoded alone, 13
of 60 STS-B sentences differed by up to 1.3e-7 from the same sentences encoded together.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skbert import BertSentenceTransformer, BertTextClassifier

WORDS = (
    "the cat sat on a mat while an old dog was not very good at chess and a film about "
    "love and hate made it great or terrible depending on who watched it late at night"
).split()


def sentences(n, seed=0, longest=40):
    """``n`` word sequences of 1 to ``longest`` words: many lengths, several texts per length."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(1, longest))) for _ in range(n)]


def one_by_one(predict, X):
    return np.vstack([predict(X[i : i + 1]) for i in range(len(X))])


@pytest.fixture(scope="module")
def minilm_transformer(packaged_model):
    return BertSentenceTransformer(packaged_model, pooling="mean", device="cpu").fit(["a"])


def test_packaged_model_alone_equals_together(minilm_transformer):
    X = sentences(90)
    together = minilm_transformer.transform(X)
    alone = one_by_one(minilm_transformer.transform, X[:40])
    np.testing.assert_array_equal(alone, together[:40])
    reordered = np.random.default_rng(1).permutation(len(X))
    np.testing.assert_array_equal(
        minilm_transformer.transform([X[i] for i in reordered]), together[reordered]
    )
    np.testing.assert_array_equal(
        minilm_transformer.transform(X[::2] + X[1::2])[:45], together[::2]
    )


def test_packaged_model_cached_and_new_texts_mixed(packaged_model, tmp_path):
    X = sentences(120, seed=2)
    uncached = BertSentenceTransformer(packaged_model, device="cpu").fit(["a"]).transform(X)
    cached = BertSentenceTransformer(packaged_model, device="cpu", memory=tmp_path).fit(["a"])
    first_half = cached.transform(X[::2])  # stored
    np.testing.assert_array_equal(first_half, uncached[::2])
    mixed = cached.transform(X)  # half read back, half new
    np.testing.assert_array_equal(mixed, uncached)


def test_packaged_model_thread_count_and_batch_size_do_not_matter(minilm_transformer):
    X = sentences(60, seed=3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # two blocks at a time, whatever the session runs with
        expected = minilm_transformer.transform(X)
        torch.set_num_threads(1)
        np.testing.assert_array_equal(minilm_transformer.transform(X), expected)
        assert torch.get_num_threads() == 1  # the caller's setting is restored
    finally:
        torch.set_num_threads(threads)
    assert torch.get_num_threads() == threads
    other = minilm_transformer.set_params(batch_size=3)
    try:
        np.testing.assert_array_equal(other.transform(X), expected)
    finally:
        minilm_transformer.set_params(batch_size=32)


@pytest.mark.parametrize(
    "params",
    [
        {"fine_tune": "top"},
        {"fine_tune": "top", "truncation": "chunks", "chunk_pooling": "attention", "max_length": 8},
        {"fine_tune": "top", "truncation": "chunks", "chunk_pooling": "mean", "max_length": 8},
    ],
    ids=["single-row", "chunks-attention", "chunks-mean"],
)
def test_classifier_outputs_alone_equal_together(packaged_model, params):
    X = sentences(50, seed=4)
    y = np.arange(len(X)) % 3
    clf = BertTextClassifier(
        packaged_model, device="cpu", max_epochs=1, random_state=0, **params
    ).fit(X, y)
    proba = clf.predict_proba(X)
    np.testing.assert_array_equal(one_by_one(clf.predict_proba, X[:25]), proba[:25])
    np.testing.assert_array_equal(clf.decision_function(X[10:40]), clf.decision_function(X)[10:40])


@pytest.mark.parametrize("width", [10, 15, 33, 384])
def test_fixed_blocks_give_a_row_its_bits_at_any_width(width):
    """The math library rounds a row by its address too (rows of 10 float32 values sit at 8
    offsets of a 64-byte line): every row is laid on a line of its own."""
    from skbert._inference.fixed_blocks import in_fixed_blocks

    torch.manual_seed(0)
    layer, rows = torch.nn.Linear(width, 3), torch.randn(100, width)
    with torch.inference_mode():
        together = in_fixed_blocks(layer, rows)
        for i in range(100):
            assert torch.equal(in_fixed_blocks(layer, rows[i : i + 1])[0], together[i]), i
        assert torch.equal(in_fixed_blocks(layer, rows[3:]), together[3:])


def test_classifier_on_a_narrow_cnn_pooling_alone_equals_together(tiny_bert):
    X = sentences(60, seed=6, longest=20)
    clf = BertTextClassifier(
        tiny_bert, pooling="cnn", cnn_kernel_sizes=(7, 9), cnn_channels=5, max_epochs=1,
        batch_size=8, device="cpu", random_state=0,
    ).fit(X, np.arange(len(X)) % 2)  # fmt: skip
    np.testing.assert_array_equal(one_by_one(clf.predict_proba, X), clf.predict_proba(X))


def test_tiny_models_alone_equal_together(tiny_model):
    X = sentences(40, seed=5, longest=20)
    est = BertSentenceTransformer(tiny_model, pooling="max", layer=[1, 2], device="cpu")
    together = est.fit(["a"]).transform(X)
    np.testing.assert_array_equal(one_by_one(est.transform, X), together)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "name, tiled",
    [
        ("tiny_roberta", True),
        ("tiny_distilbert", True),
        ("tiny_mpnet", True),
        ("tiny_deberta", True),
        ("tiny_modernbert", True),
        ("tiny_albert_unigram", False),
    ],
)
def test_each_family_gives_a_text_alone_the_bits_it_gets_among_30(request, name, tiled, precision):
    """One text alone equals the same text in a call of 30, bit for bit, on the tiled path
    (RoBERTa, DistilBERT, MPNet, DeBERTa, ModernBERT) and on the transformers forward of a
    family without one (ALBERT), each through its own kind of tokenizer (conftest.py)."""
    from skbert._inference.cpu.tiled_layers import _PLANS

    X = sentences(30, seed=7, longest=25)
    est = BertSentenceTransformer(request.getfixturevalue(name), device="cpu", precision=precision)
    together = est.fit(["a"]).transform(X)
    np.testing.assert_array_equal(one_by_one(est.transform, X), together)
    device, dtype = est._device_and_dtype(inference=True)
    backbone = est._inference_network(device, dtype).backbone
    plan = _PLANS.get(backbone, (None, None))[1]
    assert (plan is not None) == tiled


def test_an_error_during_prediction_restores_the_thread_count(tiny_bert, monkeypatch):
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(["a"])
    network = est.fitted_network()  # what a float32 prediction on the CPU runs
    threads = torch.get_num_threads()

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(network, "read_rows", broken)
    with pytest.raises(RuntimeError, match="boom"):
        est.transform(sentences(30))
    assert torch.get_num_threads() == threads


def test_accelerator_path_run_on_the_cpu_gives_the_same_rows(tiny_bert, monkeypatch):
    """The accelerator runner (a host thread preparing blocks, outputs kept on the device and
    reordered once at the end) checked on the CPU against the CPU runner: same rows, same
    order. Pinned memory and asynchronous copies only apply on CUDA and are not run here. The
    CPU runner's tiled layers attend with PyTorch's kernel here, as the transformers forward
    does, so that the two agree bit for bit (the compiled attention differs in the last bits:
    tests/test_attention_kernel.py)."""
    from skbert._inference import cpu
    from skbert._inference.accelerator import run_on_accelerator
    from skbert._inference.cpu.runner import run_on_cpu
    from skbert._inference.predict import NoBar
    from skbert._text.encoding import encode_texts, row_blocks

    monkeypatch.setattr(cpu.attention, "attention_kernel", lambda: None)
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(["a"])
    network = est.fitted_network()  # what a float32 prediction on the CPU runs
    texts = sentences(70, seed=6, longest=20)
    encoded = encode_texts(est.tokenizer_, est.special_tokens_, texts, readout=est.readout_)
    rows = [row for text_rows in encoded.rows for row in text_rows]
    blocks = list(row_blocks([len(ids) for ids, _ in rows], 32))
    assert len(blocks) > 5 and any(n < len(p) for p, n in blocks)
    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        on_cpu = run_on_cpu(network, rows, blocks, NoBar(), 2, 32, False)
        with torch.inference_mode():
            other = run_on_accelerator(network.encode_rows, rows, blocks, NoBar(), cpu)
    finally:
        torch.set_num_threads(threads)
    assert other.shape == on_cpu.shape == (len(rows), network.output_dim)
    torch.testing.assert_close(other, on_cpu, rtol=0, atol=0)
