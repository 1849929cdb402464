"""skbert.export_onnx: the graph run by onnxruntime reproduces the estimators' outputs (within
1e-4) on tiny fixtures and the packaged model, and the tokenizer saved beside it their ids."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import LONG_TEXT, TEXTS
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression

pytest.importorskip("onnx", reason="the ONNX export needs the extra 'onnx'")
pytest.importorskip("onnxscript", reason="the ONNX export needs the extra 'onnx'")
ort = pytest.importorskip("onnxruntime", reason="running the export needs the extra 'onnx'")

import torch  # noqa: E402

import skbert  # noqa: E402
from skbert import (  # noqa: E402
    BertSentenceTransformer,
    BertTextClassifier,
    BertTextRegressor,
)

TOLERANCE = 1e-4
POS = ["great film , love it", "a very good movie", "good dog", "love the cat", "great movie"]
NEG = ["terrible film , hate it", "a very bad movie", "bad dog", "hate the mat", "not good"]
LABELLED = POS + NEG
LABELS = np.array(["pos"] * 5 + ["neg"] * 5, dtype=object)
ALL_TEXTS = [*TEXTS, LONG_TEXT, *LABELLED]
FAST = {"learning_rate": 5e-3, "top_learning_rate": 5e-2, "batch_size": 4, "device": "cpu"}
FP32 = {"device": "cpu", "precision": "fp32"}


class Exported:
    """An export folder, loaded as a deployment would load it: JSON, tokenizer, session."""

    def __init__(self, folder):
        from transformers import AutoTokenizer

        self.folder = folder
        with open(os.path.join(folder, "skbert-onnx.json"), encoding="utf-8") as handle:
            self.info = json.load(handle)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        model = os.path.join(folder, self.info["model_file"])
        self.session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

    def encode(self, texts, second=None):
        args = (list(texts),) if second is None else (list(texts), list(second))
        return self.tokenizer(*args, **self.info["tokenizer_call"])

    def run(self, texts, second=None) -> dict:
        """The graph's outputs (by name) for ``texts``, as the saved tokenizer encodes them."""
        encoded = self.encode(texts, second)
        feed = {name: np.asarray(encoded[name], dtype=np.int64) for name in self.info["inputs"]}
        names = list(self.info["outputs"])
        outputs = dict(zip(names, self.session.run(names, feed), strict=True))
        if "overflow_to_sample_mapping" in encoded:
            outputs["owner"] = np.asarray(encoded["overflow_to_sample_mapping"])
        return outputs


def export(estimator, tmp_path_factory, name, **params) -> Exported:
    folder = str(tmp_path_factory.mktemp(name) / "export")
    assert skbert.export_onnx(estimator, folder, **params) == folder
    return Exported(folder)


def in_batches(exported, texts, sizes, second=None):
    """The graph's outputs for ``texts`` run in consecutive batches of the given sizes (the
    batch and sequence axes differ from one run to the next)."""
    parts, start = [], 0
    for size in sizes:
        stop = start + size
        pair = None if second is None else second[start:stop]
        parts.append(exported.run(texts[start:stop], pair))
        start = stop
    assert start == len(texts)
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def skbert_ids(estimator, texts, second=None) -> list:
    """The model rows skbert encodes for ``texts``, as lists of token ids."""
    encoded = estimator._encode(list(texts), None if second is None else list(second))
    return [list(ids) for rows in encoded.rows for ids, _ in rows]


def tokenizer_ids(exported, texts, second=None) -> list:
    encoded = exported.encode(texts, second)
    return [
        [int(t) for t, m in zip(ids, mask, strict=True) if m]
        for ids, mask in zip(encoded["input_ids"], encoded["attention_mask"], strict=True)
    ]


# ---------------------------------------------------------------- sentence transformer
@pytest.fixture(scope="module")
def frozen_bert(tiny_bert, tmp_path_factory):
    est = BertSentenceTransformer(tiny_bert, layer=[-1, -2], normalize=True, **FP32)
    est.fit(ALL_TEXTS)
    return est, export(est, tmp_path_factory, "frozen-bert")


def test_frozen_transformer_round_trip_in_batches_of_any_shape(frozen_bert):
    est, exported = frozen_bert
    assert exported.info["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert exported.info["normalize"] is True and exported.info["max_length"] == est.max_length_
    want = est.transform(ALL_TEXTS)
    for sizes in ([len(ALL_TEXTS)], [1, 3, 5, len(ALL_TEXTS) - 9], [2] * 9 + [1]):
        got = in_batches(exported, ALL_TEXTS, sizes)["embeddings"]
        np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_saved_tokenizer_gives_skbert_ids(frozen_bert):
    est, exported = frozen_bert
    assert tokenizer_ids(exported, ALL_TEXTS) == skbert_ids(est, ALL_TEXTS)
    # pairs that fit, whose shorter side takes at most half of max_length, or both long (an
    # odd budget's last token on the longer side: the first gets it here, a tie the second)
    first = [LONG_TEXT, "a dog", TEXTS[0], LONG_TEXT, LONG_TEXT]
    second = ["the cat", LONG_TEXT, TEXTS[1], LONG_TEXT[:-40], LONG_TEXT]
    assert tokenizer_ids(exported, first, second) == skbert_ids(est, first, second)
    assert exported.info["tokenizer_cuts_as_skbert"] == {
        "texts": True, "pairs_within_max_length": True, "longer_pairs": True,
    }  # fmt: skip


def test_the_json_gives_the_token_types_of_the_special_tokens(frozen_bert):
    est, exported = frozen_bert
    assert exported.info["special_token_types"] == {"single": [0, 0, 0], "pair": [0, 0, 0, 1, 1]}
    pre, mid, post = exported.info["special_tokens"]["pair"]
    ids, types = est.special_tokens_.build([7, 8], [9])
    assert ids == [*pre, 7, 8, *mid, 9, *post] and types == [0] * 4 + [1] * 2


def test_pairs_with_token_types_round_trip(frozen_bert):
    est, exported = frozen_bert
    first, second = LABELLED[:6] + [LONG_TEXT], LABELLED[4:] + [TEXTS[0]]
    want = est.transform(np.column_stack([first, second]))
    got = in_batches(exported, first, [3, 4], second)["embeddings"]
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)
    encoded = exported.encode(first, second)
    assert np.asarray(encoded["token_type_ids"]).max() == 1  # the second sentence's type


def test_export_leaves_the_estimator_as_it_was(frozen_bert, tmp_path):
    """The export traces a float32 copy on the CPU: a network in another dtype (float64
    here, as a GPU-fitted one is on CUDA) or mode keeps both (the check it replaced, that
    the weights are floating point, held without the copy too)."""
    import copy

    est, _ = frozen_bert
    before = est.transform(ALL_TEXTS)
    attributes = set(vars(est))
    skbert.export_onnx(est, tmp_path / "again")
    assert set(vars(est)) == attributes
    np.testing.assert_array_equal(est.transform(ALL_TEXTS), before)
    other = copy.deepcopy(est)
    other.network_.double().train()
    weights = {name: p.detach().clone() for name, p in other.network_.named_parameters()}
    skbert.export_onnx(other, tmp_path / "float64")
    assert other.network_.training
    for name, param in other.network_.named_parameters():
        assert param.dtype == torch.float64, name
        assert torch.equal(param, weights[name]), name


@pytest.mark.parametrize("family", ["mpnet", "deberta"])
def test_other_families_round_trip(family, request, tmp_path_factory, caplog):
    model = request.getfixturevalue(f"tiny_{family}")
    # max_length=64: under the tiny MPNet's limit of 78 tokens (80 positions, 2 before padding)
    est = BertSentenceTransformer(
        model, pooling="cls", layer=[0, -1], layer_combine="mean", max_length=64, **FP32
    )
    est.fit(ALL_TEXTS)
    with caplog.at_level(logging.WARNING):
        exported = export(est, tmp_path_factory, family, opset=18)
    # no log lines in a notebook: onnxscript's constant folding logged DeBERTa's LayerNorm
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert exported.info["opset"] == 18
    if family == "mpnet":  # MPNet reads no token types: the graph takes none
        assert exported.info["inputs"] == ["input_ids", "attention_mask"]
    got = in_batches(exported, ALL_TEXTS, [4, len(ALL_TEXTS) - 4])["embeddings"]
    np.testing.assert_allclose(got, est.transform(ALL_TEXTS), rtol=0, atol=TOLERANCE)


def test_trained_cnn_pooling_round_trip(tiny_bert, tmp_path_factory):
    est = BertSentenceTransformer(
        tiny_bert, pooling="cnn", cnn_kernel_sizes=(2, 3), cnn_channels=8, fine_tune="top",
        max_epochs=2, random_state=0, **{**FAST, **FP32},
    )  # fmt: skip
    est.fit(LABELLED, LABELS)
    exported = export(est, tmp_path_factory, "cnn")
    got = in_batches(exported, ALL_TEXTS, [1, len(ALL_TEXTS) - 1])["embeddings"]
    np.testing.assert_allclose(got, est.transform(ALL_TEXTS), rtol=0, atol=TOLERANCE)


def test_tail_truncation_is_the_tokenizers(tiny_bert, tmp_path_factory):
    est = BertSentenceTransformer(tiny_bert, truncation="tail", max_length=12, **FP32)
    exported = export(est.fit(TEXTS), tmp_path_factory, "tail")
    assert tokenizer_ids(exported, ALL_TEXTS) == skbert_ids(est, ALL_TEXTS)
    got = exported.run(ALL_TEXTS)["embeddings"]
    np.testing.assert_allclose(got, est.transform(ALL_TEXTS), rtol=0, atol=TOLERANCE)


def pool_windows(outputs, owner, n_texts, how, max_chunks):
    """The recipe of the user guide: each text's first ``max_chunks`` windows pooled."""
    pooled = []
    for i in range(n_texts):
        windows = outputs[owner == i][:max_chunks]
        pooled.append(windows.max(axis=0) if how == "max" else windows.mean(axis=0))
    return np.stack(pooled)


def test_chunks_export_the_window_network_and_the_recipe_pools_it(tiny_bert, tmp_path_factory):
    how = "max"  # (the mean: the chunked regressor's test)
    est = BertSentenceTransformer(
        tiny_bert, truncation="chunks", max_length=16, chunk_pooling=how, max_chunks=3,
        normalize=True, **FP32,
    )  # fmt: skip
    exported = export(est.fit(TEXTS), tmp_path_factory, f"chunks-{how}")
    info = exported.info
    assert info["per_window"] and info["chunk_pooling"] == how and info["max_chunks"] == 3
    out = exported.run(ALL_TEXTS)
    owner = out["owner"]
    kept = np.concatenate([np.flatnonzero(owner == i)[:3] for i in range(len(ALL_TEXTS))])
    assert [tokenizer_ids(exported, ALL_TEXTS)[j] for j in kept] == skbert_ids(est, ALL_TEXTS)
    vectors = pool_windows(out["window_embeddings"], owner, len(ALL_TEXTS), how, 3)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, est.transform(ALL_TEXTS), rtol=0, atol=TOLERANCE)


# ---------------------------------------------------------------- classifier and regressor
def test_classifier_on_pairs_round_trip(tiny_bert, tmp_path_factory):
    first, second = LABELLED, LABELLED[::-1]
    X = np.column_stack([first, second])
    clf = BertTextClassifier(tiny_bert, max_epochs=3, random_state=0, **{**FAST, **FP32})
    clf.fit(X, LABELS)
    exported = export(clf, tmp_path_factory, "classifier")
    assert exported.info["classes"] == ["neg", "pos"] and exported.info["pairs"] is True
    out = in_batches(exported, first, [3, 7], second)
    np.testing.assert_allclose(out["probabilities"], clf.predict_proba(X), rtol=0, atol=TOLERANCE)
    logits = out["logits"]
    decision = logits[:, 1] - logits[:, 0]
    np.testing.assert_allclose(decision, clf.decision_function(X), rtol=0, atol=TOLERANCE)
    labels = np.asarray(exported.info["classes"], dtype=object)[out["probabilities"].argmax(1)]
    np.testing.assert_array_equal(labels, clf.predict(X))


def test_multilabel_classifier_gives_sigmoid_probabilities(tiny_albert, tmp_path_factory):
    Y = np.array([[1, 0], [1, 1], [0, 1], [0, 0], [1, 0]] * 2)
    clf = BertTextClassifier(tiny_albert, max_epochs=2, random_state=0, **{**FAST, **FP32})
    exported = export(clf.fit(LABELLED, Y), tmp_path_factory, "multilabel")
    assert exported.info["multilabel"] is True
    out = exported.run(ALL_TEXTS)
    np.testing.assert_allclose(
        out["probabilities"], clf.predict_proba(ALL_TEXTS), rtol=0, atol=TOLERANCE
    )
    np.testing.assert_array_equal((out["logits"] > 0) * 1, clf.predict(ALL_TEXTS))  # as predict


def test_regressor_predicts_in_the_units_of_y(tiny_distilbert, tmp_path_factory):
    rng = np.random.default_rng(0)
    y = np.column_stack([rng.normal(300, 40, 10), rng.normal(-2, 0.5, 10)])
    reg = BertTextRegressor(tiny_distilbert, max_epochs=2, random_state=0, **{**FAST, **FP32})
    exported = export(reg.fit(LABELLED, y), tmp_path_factory, "regressor")
    assert exported.info["inputs"] == ["input_ids", "attention_mask"]  # DistilBERT: no types
    got = in_batches(exported, ALL_TEXTS, [5, len(ALL_TEXTS) - 5])["predictions"]
    np.testing.assert_allclose(got, reg.predict(ALL_TEXTS), rtol=1e-6, atol=TOLERANCE)


def test_regressor_far_from_zero_keeps_its_digits(tiny_bert, tmp_path_factory):
    """Targets near 1.7e9 (timestamps): a float32 shift rounded every prediction to one value
    (off by up to 60); the graph applies the fitted standardisation in float64, as predict."""
    y = 1.7e9 + np.linspace(0, 100, len(LABELLED))
    reg = BertTextRegressor(tiny_bert, max_epochs=1, random_state=0, **{**FAST, **FP32})
    exported = export(reg.fit(LABELLED, y), tmp_path_factory, "regressor-offset")
    got = exported.run(ALL_TEXTS)["predictions"]
    expected = reg.predict(ALL_TEXTS)
    assert got.dtype == np.float64 and len(np.unique(expected)) > 1
    np.testing.assert_allclose(got[:, 0], expected, rtol=0, atol=TOLERANCE * reg.target_scale_[0])


def test_a_left_padding_tokenizer_is_saved_padding_on_the_right(tiny_bert, tmp_path_factory):
    """skbert pads on the right; a checkpoint whose tokenizer pads on the left gave padded
    rows of a batch off by 1.6 ([CLS] and the positions moved)."""
    folder = tmp_path_factory.mktemp("left") / "model"
    shutil.copytree(tiny_bert, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    est = BertSentenceTransformer(str(folder), pooling="cls", **FP32).fit(ALL_TEXTS)
    exported = export(est, tmp_path_factory, "left-padding")
    assert exported.tokenizer.padding_side == "right"
    got = exported.run(ALL_TEXTS)["embeddings"]
    np.testing.assert_allclose(got, est.transform(ALL_TEXTS), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("family", ["bert", "roberta", "modernbert"])
@pytest.mark.parametrize("truncation", ["head", "tail"])
def test_tokenizer_json_cuts_and_pads_for_the_tokenizers_package(
    family, truncation, request, tmp_path_factory
):
    """The guide offers the tokenizers package with tokenizer.json (RoBERTa-style tokenizers
    under transformers 4): the saved file had no truncation and no padding, so a text past
    max_length gave another vector (0.25 apart) and one past the model's positions failed in
    onnxruntime."""
    from tokenizers import Tokenizer

    est = BertSentenceTransformer(
        request.getfixturevalue(f"tiny_{family}"), max_length=12, truncation=truncation, **FP32
    ).fit(ALL_TEXTS)
    exported = export(est, tmp_path_factory, f"tokenizers-{family}-{truncation}")
    tokenizer = Tokenizer.from_file(os.path.join(exported.folder, "tokenizer.json"))
    encoded = tokenizer.encode_batch(ALL_TEXTS)
    ids = [[t for t, m in zip(e.ids, e.attention_mask, strict=True) if m] for e in encoded]
    assert ids == skbert_ids(est, ALL_TEXTS)
    assert len({len(e.ids) for e in encoded}) == 1  # padded to the batch's longest
    feed = {
        "input_ids": [e.ids for e in encoded],
        "attention_mask": [e.attention_mask for e in encoded],
        "token_type_ids": [e.type_ids for e in encoded],
    }
    feed = {name: np.asarray(feed[name], dtype=np.int64) for name in exported.info["inputs"]}
    (got,) = exported.session.run(["embeddings"], feed)
    np.testing.assert_allclose(got, est.transform(ALL_TEXTS), rtol=0, atol=TOLERANCE)


def test_a_tokenizer_without_a_pad_token_exports_one_that_pads(tiny_modernbert, tmp_path_factory):
    """skbert pads with id 0 where the tokenizer has no pad token; the export saved the
    tokenizer without one, and the documented call refused every batch ('Asking to pad but
    the tokenizer does not have a padding token')."""
    folder = tmp_path_factory.mktemp("nopad") / "model"
    shutil.copytree(tiny_modernbert, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("pad_token", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    est = BertSentenceTransformer(str(folder), max_length=12, **FP32).fit(ALL_TEXTS)
    assert est.tokenizer_.pad_token_id is None
    exported = export(est, tmp_path_factory, "no-pad-token")
    assert exported.tokenizer.pad_token_id == 0
    got = exported.run(ALL_TEXTS)["embeddings"]
    np.testing.assert_allclose(got, est.transform(ALL_TEXTS), rtol=0, atol=TOLERANCE)


def test_an_ordinary_token_at_id_0_is_not_made_the_pad_token(tmp_path):
    """Making id 0's token the pad token made it special, and a special token is split out of
    texts: a byte-level BPE whose id 0 is '!' read '!!' (one token) as '!', '!' once saved.
    Such a tokenizer is saved without padding, with a warning, and reads texts as before."""
    from types import SimpleNamespace

    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    import skbert.onnx

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(["the cat sat on the mat!! hello world!"] * 10, trainer)
    backend.add_special_tokens(["[CLS]", "[SEP]", "[UNK]"])
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )
    assert tokenizer.convert_ids_to_tokens(0) == "!" and tokenizer.pad_token_id is None
    texts = ["the cat sat!! on the mat!", "hello world!!"]
    estimator = SimpleNamespace(
        tokenizer_=tokenizer, max_length_=64, readout_=SimpleNamespace(truncation="head")
    )
    with pytest.warns(UserWarning, match=r"no pad token, and id 0 \('!'\) is an ordinary"):
        skbert.onnx._save_tokenizer(estimator, str(tmp_path))
    saved = AutoTokenizer.from_pretrained(tmp_path)
    assert saved.pad_token_id is None
    assert [saved(t)["input_ids"] for t in texts] == [tokenizer(t)["input_ids"] for t in texts]
    assert Tokenizer.from_file(str(tmp_path / "tokenizer.json")).padding is None


def test_an_opset_the_exporter_cannot_write_fails_before_writing(frozen_bert, tmp_path):
    """torch's exporter falls back to opset 18 for an opset it does not know, keeping newer
    operators: the export reported success and onnxruntime refused the graph. (Opset 26 is
    known to onnx 1.23, up to 28, but not to torch 2.13's exporter, which writes up to 25;
    an opset newer than onnx knows is refused before the trace: the test above.)"""
    est, _ = frozen_bert
    with pytest.raises(ValueError, match=r"opset=26 is not one torch .* fell back to opset 18"):
        skbert.export_onnx(est, tmp_path / "out", opset=26)
    assert not (tmp_path / "out").exists()


def test_chunked_regressor_with_mean_pooling_averages_its_windows(tiny_bert, tmp_path_factory):
    reg = BertTextRegressor(
        tiny_bert, truncation="chunks", max_length=10, max_epochs=1, random_state=0,
        **{**FAST, **FP32},
    )  # fmt: skip
    reg.set_params(max_chunks=np.arange(1, 9)[7])  # a numpy int, as np.arange grids give
    exported = export(reg.fit(LABELLED, np.arange(10.0)), tmp_path_factory, "regressor-chunks")
    assert exported.info["max_chunks"] == 8
    out = exported.run(ALL_TEXTS)
    got = pool_windows(
        out["window_predictions"], out["owner"], len(ALL_TEXTS), "mean", exported.info["max_chunks"]
    )
    np.testing.assert_allclose(got[:, 0], reg.predict(ALL_TEXTS), rtol=0, atol=TOLERANCE)


def test_chunked_classifier_with_max_pooling_is_refused(tiny_bert, tmp_path):
    clf = BertTextClassifier(
        tiny_bert, truncation="chunks", chunk_pooling="max", max_length=10, max_epochs=1,
        random_state=0, **FAST,
    )  # fmt: skip
    clf.fit(LABELLED, LABELS)
    with pytest.raises(ValueError, match=r"chunk_pooling='max'.*\('mean',\)"):
        skbert.export_onnx(clf, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_subclass_exports_as_its_base_class(tiny_bert, tmp_path_factory, monkeypatch):
    """The chunk poolings a graph reproduces were looked up by the class's name: a subclass of
    BertSentenceTransformer with chunk_pooling='max' was refused as a classifier would be."""
    from skbert._estimator.persistence import registry

    # the subclass registers itself for skbert.load: it leaves with the test
    monkeypatch.setattr(registry, "_CLASSES", dict(registry._CLASSES))

    class MyEncoder(BertSentenceTransformer):
        pass

    est = MyEncoder(tiny_bert, truncation="chunks", chunk_pooling="max", max_length=10, **FP32)
    exported = export(est.fit(ALL_TEXTS), tmp_path_factory, "subclass")
    assert exported.info["per_window"] is True


def test_class_labels_in_the_json_are_read_alike_in_any_encoding(tiny_bert, tmp_path_factory):
    """The JSON held labels in UTF-8: open() under cp1252 (Windows' default) read 'négatif'
    as 'nÃ©gatif'. It is ASCII now, labels escaped."""
    labels = np.where(LABELS == "pos", "positif ✓", "négatif")
    clf = BertTextClassifier(tiny_bert, max_epochs=1, random_state=0, **{**FAST, **FP32})
    exported = export(clf.fit(LABELLED, labels), tmp_path_factory, "labels")
    path = os.path.join(exported.folder, "skbert-onnx.json")
    with open(path, encoding="cp1252") as handle:
        assert json.load(handle)["classes"] == ["négatif", "positif ✓"]


def test_a_path_under_a_file_is_refused_before_the_trace(frozen_bert, tmp_path, monkeypatch):
    """It traced the whole graph, then failed making the folder: '[Errno 20] Not a
    directory'."""
    import skbert.onnx

    est, _ = frozen_bert
    (tmp_path / "afile").write_text("x")

    def no_trace(*args):
        raise AssertionError("traced before the path was checked")

    monkeypatch.setattr(skbert.onnx, "_trace", no_trace)
    with pytest.raises(NotADirectoryError, match=r"lies under .*afile'?, an existing file"):
        skbert.export_onnx(est, tmp_path / "afile" / "sub" / "export")


# ---------------------------------------------------------------- the packaged model
@pytest.mark.real_model
def test_packaged_model_transformer_round_trip(packaged_model, tmp_path_factory):
    est = BertSentenceTransformer(packaged_model, **FP32).fit(ALL_TEXTS)
    exported = export(est, tmp_path_factory, "minilm")
    assert exported.info["normalize"] is True  # all-MiniLM-L6-v2 ends in Normalize
    texts = [*ALL_TEXTS, "a much longer sentence " * 150]  # past max_length=512
    assert tokenizer_ids(exported, texts) == skbert_ids(est, texts)
    got = in_batches(exported, texts, [1, 6, len(texts) - 7])["embeddings"]
    np.testing.assert_allclose(got, est.transform(texts), rtol=0, atol=TOLERANCE)


@pytest.mark.real_model
def test_packaged_model_classifier_round_trip(packaged_model, tmp_path_factory):
    clf = BertTextClassifier(
        packaged_model, fine_tune="top", max_length=64, max_epochs=2, random_state=0,
        **{**FAST, **FP32},
    )  # fmt: skip
    exported = export(clf.fit(LABELLED, LABELS), tmp_path_factory, "minilm-classifier")
    got = in_batches(exported, ALL_TEXTS, [2, len(ALL_TEXTS) - 2])["probabilities"]
    np.testing.assert_allclose(got, clf.predict_proba(ALL_TEXTS), rtol=0, atol=TOLERANCE)


# ---------------------------------------------------------------- errors and imports
def test_unfitted_estimator_raises_not_fitted(tiny_bert, tmp_path):
    with pytest.raises(NotFittedError):
        skbert.export_onnx(BertSentenceTransformer(tiny_bert), tmp_path / "out")


def test_the_folder_opset_and_leftovers_of_an_export(frozen_bert, tmp_path, tiny_bert, monkeypatch):
    """A numpy opset passed the check and failed writing the JSON after the whole trace; an
    export into a model's own folder replaced its tokenizer files (a model fitted from it
    then cut texts at the export's max_length, from the left); a graph saved without
    external data left a previous export's model.onnx.data beside it; an opset newer than
    onnx knows was traced first."""
    import onnx

    from skbert import onnx as exporter

    est, _ = frozen_bert
    folder = tmp_path / "numpy-opset"
    assert skbert.export_onnx(est, folder, opset=np.int64(18)) == str(folder)
    assert json.loads((folder / "skbert-onnx.json").read_text())["opset"] == 18
    model_folder = tmp_path / "model"
    shutil.copytree(tiny_bert, model_folder)
    before = {p.name: p.read_bytes() for p in model_folder.iterdir()}
    with pytest.raises(FileExistsError, match=r"not an export of export_onnx .* no skbert-onnx"):
        skbert.export_onnx(est, model_folder)
    assert {p.name: p.read_bytes() for p in model_folder.iterdir()} == before
    (folder / "model.onnx.data").write_bytes(b"weights of a previous, larger export")
    skbert.export_onnx(est, folder)  # a previous export: replaced
    assert not (folder / "model.onnx.data").exists()
    newest = onnx.defs.onnx_opset_version()
    monkeypatch.setattr(exporter, "_trace", lambda *a: pytest.fail("traced before the check"))
    with pytest.raises(ValueError, match=rf"opset={newest + 1} .* knows opsets up to {newest}"):
        skbert.export_onnx(est, tmp_path / "newer", opset=newest + 1)


def test_other_estimators_and_bad_opsets_are_refused(frozen_bert, tmp_path):
    with pytest.raises(TypeError, match="estimator=LogisticRegression"):
        skbert.export_onnx(LogisticRegression(), tmp_path / "out")
    with pytest.raises(TypeError, match="the class BertTextClassifier itself: pass a fitted"):
        skbert.export_onnx(BertTextClassifier, tmp_path / "out")
    est, _ = frozen_bert
    for path in (None, 3):
        with pytest.raises(
            TypeError, match=f"path must be a folder path .* got {type(path).__name__}"
        ):
            skbert.export_onnx(est, path)
    for opset in (17, 18.0, True, "20"):
        with pytest.raises(ValueError, match=rf"opset={opset!r} .* >= 18"):
            skbert.export_onnx(est, tmp_path / "out", opset=opset)


def test_import_skbert_imports_no_onnx_package():
    code = """
import sys
import skbert
packages = ("onnx", "onnxruntime", "onnxscript", "onnx_ir")
loaded = [m for m in (*packages, "skbert.onnx") if m in sys.modules]
assert not loaded, f"import skbert imported {loaded}"
assert "export_onnx" in skbert.__all__ and callable(skbert.export_onnx)
loaded = [m for m in packages if m in sys.modules]  # the export imports them when it runs
assert "skbert.onnx" in sys.modules and not loaded, f"skbert.export_onnx imported {loaded}"
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
