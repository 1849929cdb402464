"""BertSentenceTransformer with a frozen encoder, on the tiny BERT and ALBERT fixtures."""

import pickle

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import LONG_TEXT, TEXTS
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.utils._param_validation import InvalidParameterError

from skbert import BertSentenceTransformer


def make(model, **params):
    return BertSentenceTransformer(model, device="cpu", **params)


def test_shape_dtype_and_fit_returns_self(tiny_model):
    est = make(tiny_model)
    assert est.fit(TEXTS) is est
    out = est.transform(TEXTS)
    assert out.shape == (len(TEXTS), 16) and out.dtype == np.float32
    assert np.isfinite(out).all()


def test_generators_of_texts_fit_transform_as_lists(tiny_bert):
    # fit and transform both read X: the second read of a generator found it empty
    est = BertSentenceTransformer(tiny_bert, device="cpu")
    vectors = clone(est).fit_transform(t for t in TEXTS)
    np.testing.assert_array_equal(vectors, clone(est).fit_transform(TEXTS))
    labels = [0, 1] * (len(TEXTS) // 2)
    pipe = make_pipeline(clone(est), LogisticRegression()).fit((t for t in TEXTS), labels)
    np.testing.assert_array_equal(pipe.predict(TEXTS), pipe.fit(TEXTS, labels).predict(TEXTS))


def test_vectors_match_a_direct_forward_pass(tiny_model):
    """Mean pooling of the last layer, computed by hand from the Hugging Face model."""
    est = make(tiny_model, pooling="mean").fit(TEXTS)
    tokenizer, backbone = est.tokenizer_, est.network_.backbone
    for text, vector in zip(TEXTS, est.transform(TEXTS), strict=True):
        enc = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            states = backbone(**enc).last_hidden_state[0]
        np.testing.assert_allclose(vector, states.mean(0).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_order_and_batching_do_not_change_vectors(tiny_model, pooling):
    """Length-sorted batches with padding give each text the vector it gets alone."""
    full = make(tiny_model, pooling=pooling, batch_size=3).fit(TEXTS).transform(TEXTS)
    one_by_one = make(tiny_model, pooling=pooling, batch_size=1).fit(TEXTS)
    reversed_ = one_by_one.transform(TEXTS[::-1])[::-1]
    np.testing.assert_allclose(full, reversed_, rtol=1e-5, atol=1e-6)


def test_poolings_differ(tiny_bert):
    outs = {
        p: make(tiny_bert, pooling=p).fit(TEXTS).transform(TEXTS) for p in ("cls", "mean", "max")
    }
    assert not np.allclose(outs["cls"], outs["mean"])
    assert not np.allclose(outs["mean"], outs["max"])


def test_layer_selection_and_combination(tiny_model):
    est = make(tiny_model, layer=0).fit(TEXTS)
    assert est.layers_ == (0,)
    layer0 = est.transform(TEXTS)
    last = make(tiny_model, layer=2).fit(TEXTS).transform(TEXTS)
    np.testing.assert_array_equal(last, make(tiny_model, layer=-1).fit(TEXTS).transform(TEXTS))
    assert not np.allclose(layer0, last)
    concat = make(tiny_model, layer=(0, -1), layer_combine="concat").fit(TEXTS).transform(TEXTS)
    assert concat.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(concat, np.hstack([layer0, last]), rtol=1e-5, atol=1e-6)
    mean = make(tiny_model, layer=(0, -1), layer_combine="mean").fit(TEXTS).transform(TEXTS)
    np.testing.assert_allclose(mean, (layer0 + last) / 2, rtol=1e-5, atol=1e-5)
    mx = make(tiny_model, layer=(0, -1), layer_combine="max", pooling="cls").fit(TEXTS)
    cls0 = make(tiny_model, layer=0, pooling="cls").fit(TEXTS).transform(TEXTS)
    cls_last = make(tiny_model, layer=-1, pooling="cls").fit(TEXTS).transform(TEXTS)
    np.testing.assert_allclose(mx.transform(TEXTS), np.maximum(cls0, cls_last), rtol=1e-6)


@pytest.mark.parametrize("layer", [3, -4, (0, 5)])
def test_layer_out_of_range(tiny_model, layer):
    with pytest.raises(ValueError, match=r"layer=.* is out of range.*3 hidden states"):
        make(tiny_model, layer=layer).fit(TEXTS)


@pytest.mark.parametrize("layer", [(), (1.5,), True, "last"])
def test_bad_layer_values(tiny_bert, layer):
    with pytest.raises((ValueError, TypeError, InvalidParameterError), match="layer"):
        make(tiny_bert, layer=layer).fit(TEXTS)


def test_max_length_defaults_to_model_limit_and_is_checked(tiny_bert):
    assert make(tiny_bert).fit(TEXTS).max_length_ == 64
    with pytest.raises(ValueError, match="max_length=100 exceeds this model's limit of 64"):
        make(tiny_bert, max_length=100).fit(TEXTS)


def test_truncation_strategies_keep_the_right_tokens(tiny_bert):
    """Each strategy's vector equals the vector of the text cut by hand."""
    words = LONG_TEXT.split()
    texts = [LONG_TEXT]
    est = {
        t: make(tiny_bert, truncation=t, max_length=10, head_length=3).fit(texts)
        for t in ("head", "tail", "head+tail")
    }
    plain = make(tiny_bert, max_length=10).fit(texts)
    # every word of LONG_TEXT is one token, so 8 content tokens = 8 words
    np.testing.assert_allclose(
        est["head"].transform(texts), plain.transform([" ".join(words[:8])]), rtol=1e-5
    )
    np.testing.assert_allclose(
        est["tail"].transform(texts), plain.transform([" ".join(words[-8:])]), rtol=1e-5
    )
    np.testing.assert_allclose(
        est["head+tail"].transform(texts),
        plain.transform([" ".join(words[:3] + words[-5:])]),
        rtol=1e-5,
    )


@pytest.mark.parametrize("chunk_pooling", ["mean", "max"])
def test_chunks_pool_every_window(tiny_model, chunk_pooling):
    words = LONG_TEXT.split()[:20]
    text = " ".join(words)
    windows = [" ".join(words[i : i + 8]) for i in range(0, 20, 8)]  # 8 + 8 + 4 tokens
    est = make(tiny_model, truncation="chunks", chunk_pooling=chunk_pooling, max_length=10)
    vector = est.fit([text]).transform([text, "the cat"])[0]
    parts = make(tiny_model, max_length=10).fit(windows).transform(windows)
    expected = parts.mean(0) if chunk_pooling == "mean" else parts.max(0)
    np.testing.assert_allclose(vector, expected, rtol=1e-5, atol=1e-6)
    capped = make(
        tiny_model, truncation="chunks", chunk_pooling=chunk_pooling, max_length=10, max_chunks=1
    ).fit([text])
    np.testing.assert_allclose(capped.transform([text])[0], parts[0], rtol=1e-5, atol=1e-6)


def test_chunks_batch_many_texts_like_one(tiny_bert):
    texts = [LONG_TEXT, *TEXTS, LONG_TEXT[:100]]
    est = make(tiny_bert, truncation="chunks", max_length=12, batch_size=4).fit(texts)
    together = est.transform(texts)
    alone = np.vstack([est.transform([t]) for t in texts])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)


def test_head_length_must_leave_room(tiny_bert):
    with pytest.raises(ValueError, match=r"head_length=128 .* needs head_length < 62"):
        make(tiny_bert, truncation="head+tail").fit(TEXTS)


def test_trainable_poolings_need_training(tiny_bert):
    with pytest.raises(ValueError, match="pooling='cnn' has weights .* fine_tune='none'"):
        make(tiny_bert, pooling="cnn").fit(TEXTS)
    with pytest.raises(ValueError, match="chunk_pooling='attention' has weights"):
        make(tiny_bert, truncation="chunks", chunk_pooling="attention").fit(TEXTS)


@pytest.mark.parametrize(
    "params", [{"pooling": "cnn"}, {"truncation": "chunks", "chunk_pooling": "attention"}]
)
def test_trainable_pooling_frozen_offers_training_and_weight_free_poolings(tiny_bert, params):
    """Both ways out: train the pooling's weights, or pool without weights."""
    with pytest.raises(ValueError) as info:
        make(tiny_bert, **params).fit(TEXTS)
    message = str(info.value)
    assert "fine_tune='top'" in message and "fine_tune='full'" in message
    assert "fit(X, y)" in message  # training needs labels
    assert "pooling='cls', 'mean' or 'max'" in message
    assert "chunk_pooling='mean' or 'max'" in message


@pytest.mark.parametrize(
    "param, value",
    [
        ("pooling", "sum"),
        ("truncation", "middle"),
        ("layer_combine", "sum"),
        ("precision", "fp8"),
        ("batch_size", 0),
        ("fine_tune", "all"),
        ("max_length", 2),
    ],
)
def test_invalid_parameters_are_named(tiny_bert, param, value):
    with pytest.raises(InvalidParameterError, match=f"'{param}' parameter"):
        make(tiny_bert, **{param: value}).fit(TEXTS)


def test_bad_device(tiny_bert):
    est = make(tiny_bert).fit(TEXTS)
    est.set_params(device="tpu")
    with pytest.raises(ValueError, match="device='tpu' is not allowed"):
        est.transform(TEXTS)
    if not torch.cuda.is_available():
        est.set_params(device="cuda")  # a fitted model predicts on the CPU, with a warning
        with pytest.warns(UserWarning, match="device='cuda' is not available here"):
            est.transform(TEXTS)


def test_normalize(tiny_model):
    out = make(tiny_model, normalize=True).fit(TEXTS).transform(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_sentence_pairs_are_encoded_together(tiny_model):
    pairs = [("the cat sat", "a dog is good"), ("great film", "")]
    est = make(tiny_model).fit(pairs)
    out = est.transform(pairs)
    assert out.shape == (2, 16)
    tokenizer, backbone = est.tokenizer_, est.network_.backbone
    enc = tokenizer(*pairs[0], return_tensors="pt")
    with torch.no_grad():
        expected = backbone(**enc).last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="truncation='chunks' .* sentence pairs"):
        make(tiny_model, truncation="chunks").fit(pairs).transform(pairs)


def test_bf16_is_close_to_fp32(tiny_bert):
    fp32 = make(tiny_bert, precision="fp32").fit(TEXTS).transform(TEXTS)
    bf16 = make(tiny_bert, precision="bf16").fit(TEXTS).transform(TEXTS)
    assert bf16.dtype == np.float32
    cos = (fp32 * bf16).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(bf16, axis=1)
    assert cos.min() > 0.99


def test_transform_before_fit():
    with pytest.raises(NotFittedError):
        BertSentenceTransformer().transform(["a"])


@pytest.mark.parametrize(
    "X, error, match",
    [
        ("just a string", TypeError, "single str"),
        ([], ValueError, "empty"),
        (["a", None], ValueError, r"X\[1\] is missing"),
        (["a", 3], TypeError, r"X\[1\] is an int"),
        (np.array([["a", "b", "c"]], dtype=object), ValueError, "3 columns"),
    ],
)
def test_bad_input_in_fit_and_transform(tiny_bert, X, error, match):
    with pytest.raises(error, match=match):
        make(tiny_bert).fit(X)
    est = make(tiny_bert).fit(TEXTS)
    with pytest.raises(error, match=match):
        est.transform(X)


def test_feature_names_and_pandas_output(tiny_bert):
    est = make(tiny_bert, layer=(-2, -1)).fit(TEXTS)
    names = est.get_feature_names_out()
    assert len(names) == 32 and names[0] == "bertsentencetransformer0"
    est.set_output(transform="pandas")
    frame = est.transform(pd.Series(TEXTS, index=range(10, 10 + len(TEXTS))))
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == list(names) and frame.shape == (len(TEXTS), 32)


def test_verbose_reports_truncation_and_shows_progress(tiny_bert, capsys, tmp_path):
    est = make(tiny_bert, max_length=10, verbose=1).fit(TEXTS)
    est.transform([LONG_TEXT, "the cat"])
    err = capsys.readouterr().err
    assert "1 of the 2 texts encoded exceed max_length=10 tokens and were truncated" in err
    est.transform([[LONG_TEXT, "a cat"], ["the cat", "a dog"], ["a", "b"]])
    assert "1 of the 3 pairs encoded exceed max_length=10 tokens" in capsys.readouterr().err
    assert "Encoding" in err  # the tqdm progress bar
    # with the feature cache, only the texts it lacks are encoded, and both reports say so
    cached = make(tiny_bert, max_length=10, verbose=1, memory=tmp_path / "cache").fit(TEXTS)
    cached.transform(["the cat", "a dog"])
    capsys.readouterr()
    cached.transform(["the cat", "a dog", LONG_TEXT, "a bird"])
    err = capsys.readouterr().err
    assert "1 of the 2 texts encoded exceed max_length=10 tokens" in err
    assert "2 of 4 texts read from the feature cache, 2 encoded" in err
    make(tiny_bert, max_length=10).fit(TEXTS).transform([LONG_TEXT])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("dump", ["pickle", "joblib"])
def test_round_trip_is_bit_identical(tiny_model, tmp_path, dump):
    est = make(tiny_model, pooling="max", layer=(-2, -1)).fit(TEXTS)
    before = est.transform(TEXTS)
    if dump == "pickle":
        loaded = pickle.loads(pickle.dumps(est))
    else:
        joblib.dump(est, tmp_path / "est.joblib")
        loaded = joblib.load(tmp_path / "est.joblib")
    np.testing.assert_array_equal(loaded.transform(TEXTS), before)
    assert next(loaded.network_.parameters()).device.type == "cpu"
    np.testing.assert_array_equal(est.transform(TEXTS), before)  # the original still works


def test_clone_gives_same_output(tiny_bert):
    est = make(tiny_bert, pooling="cls").fit(TEXTS)
    copy = clone(est)
    assert not hasattr(copy, "network_")
    np.testing.assert_array_equal(copy.fit(TEXTS).transform(TEXTS), est.transform(TEXTS))


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_pipeline_and_grid_search(tiny_bert, n_jobs):
    X = np.array(TEXTS * 3, dtype=object)
    y = np.array([0, 1, 0, 1, 0, 0, 1, 1] * 3)
    pipe = make_pipeline(make(tiny_bert), LogisticRegression(max_iter=200))
    grid = GridSearchCV(
        pipe,
        {
            "bertsentencetransformer__pooling": ["cls", "mean"],
            "bertsentencetransformer__layer": [-1, (1, 2)],
        },
        cv=2,
        n_jobs=n_jobs,
        error_score="raise",
    )
    grid.fit(X, y)
    assert len(grid.cv_results_["params"]) == 4
    assert np.isfinite(grid.cv_results_["mean_test_score"]).all()
    assert grid.predict(X[:3]).shape == (3,)


@pytest.mark.parametrize(
    "params",
    [{}, {"pooling": "max", "layer": (0, 2)}, {"truncation": "chunks", "max_length": 16}],
)
def test_a_text_vector_does_not_depend_on_the_other_texts(tiny_model, params):
    texts = TEXTS + [LONG_TEXT, LONG_TEXT[:70], "the cat sat on the mat ."]
    est = BertSentenceTransformer(tiny_model, device="cpu", batch_size=2, **params).fit(texts)
    everything = est.transform(texts)
    for subset in ([0, 3, 8], [9], list(range(len(texts)))[::-1]):
        part = est.transform([texts[i] for i in subset])
        if "albert" in tiny_model and params.get("truncation") == "chunks":
            # Padding-free batches remove the padding effect; whether a matrix product gives
            # the same bits for a row at every batch size is up to the math library: for the
            # tiny ALBERT's shapes it differs in the last bit (3e-8) here.
            np.testing.assert_allclose(part, everything[subset], rtol=0, atol=1e-6)
        else:
            np.testing.assert_array_equal(part, everything[subset])
