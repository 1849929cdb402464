"""save() / skbert.load(), safe pickles, and models fitted on a GPU predicting on a CPU."""

from __future__ import annotations

import copy
import io
import json
import math
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
import torch
from conftest import LONG_TEXT, TEXTS
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator

import skbert
from skbert import BertSentenceTransformer, BertTextClassifier, BertTextRegressor
from skbert._estimator.persistence.codec import SaveReader, SaveWriter

PAIRS = np.array([[a, b] for a, b in zip(TEXTS, TEXTS[::-1], strict=True)], dtype=object)
SCORES = np.linspace(0.0, 5.0, len(PAIRS))
LABELS = np.array([0, 1] * 4)
WORDS = np.array(["neg", "pos", "neutral", "pos", "neg", "neutral", "pos", "neg"], dtype=object)
MULTI = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]] * 2)
FALLBACK = "is not available here; predicting on the CPU"
TRAIN = {"max_epochs": 1, "batch_size": 4, "random_state": 0, "device": "cpu"}
#: extensions of pickle-based formats, none of which may appear in a save
PICKLE_SUFFIXES = {".pkl", ".pickle", ".bin", ".pt", ".pth", ".joblib", ".npy", ".npz"}


# ---------------------------------------------------------------------- helpers
def assert_no_pickle(folder: Path) -> None:
    """No file of a save is a pickle: no pickle suffix, safetensors files parse as such, and
    no other file starts with pickle's protocol bytes (0x80, then protocol 2 to 5)."""
    from safetensors import safe_open

    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert path.suffix not in PICKLE_SUFFIXES, path
        if path.suffix == ".safetensors":
            with safe_open(path, framework="pt") as handle:
                assert list(handle.keys())
            continue
        head = path.read_bytes()[:2]
        assert not (len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5), path


def assert_same(a, b, where: str) -> None:
    """``a`` and ``b`` are the same value: same type, equal bits for tensors and arrays."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, torch.nn.Module):
        sa, sb = a.state_dict(), b.state_dict()
        assert list(sa) == list(sb), where
        for key in sa:
            assert sa[key].dtype == sb[key].dtype and torch.equal(sa[key], sb[key]), (where, key)
        assert a.training == b.training, where
        if hasattr(a, "readout"):
            assert a.readout == b.readout, where
    elif isinstance(a, BaseEstimator) and not isinstance(a, FrozenEstimator):
        assert_same_estimator(a, b)
    elif isinstance(a, FrozenEstimator):
        assert_same_estimator(a.estimator, b.estimator)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), where
        if a.dtype == object:
            for x, y in zip(a.ravel(), b.ravel(), strict=True):
                assert type(x) is type(y), where
    elif isinstance(a, np.random.RandomState):
        assert_same(a.get_state(), b.get_state(), where)
    elif isinstance(a, joblib.Memory):
        assert a.location == b.location, where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif hasattr(a, "get_vocab"):  # a tokenizer
        assert a.get_vocab() == b.get_vocab(), where
        assert a(list(TEXTS))["input_ids"] == b(list(TEXTS))["input_ids"], where
        assert a(TEXTS[0], TEXTS[1])["input_ids"] == b(TEXTS[0], TEXTS[1])["input_ids"], where
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, (where, a, b)


def assert_same_estimator(a, b) -> None:
    """Same class, same parameters (nested estimators compared the same way) and the same
    fitted attributes."""
    assert type(a) is type(b)
    assert_same(a.get_params(deep=False), b.get_params(deep=False), "params")
    fitted_a, fitted_b = vars(a), vars(b)  # predictions keep nothing in vars: all compared
    assert sorted(fitted_a) == sorted(fitted_b)
    for name in fitted_a:
        assert_same(fitted_a[name], fitted_b[name], name)


def round_trips(est, tmp_path, pickled=True):
    """``est`` saved and loaded, and (if ``pickled``) pickled and unpickled."""
    folder = tmp_path / "saved"
    assert est.save(folder) == str(folder)
    assert_no_pickle(folder)
    return [skbert.load(folder)] + ([pickle.loads(pickle.dumps(est))] if pickled else [])


def outputs(est, X) -> list:
    if isinstance(est, BertTextClassifier):
        return [est.predict_proba(X), est.decision_function(X), est.predict(X)]
    if isinstance(est, BertTextRegressor):
        return [est.predict(X)]
    return [est.transform(X)]


def assert_round_trip(est, tmp_path, *inputs, pickled=True):
    """Saved and loaded, or pickled, ``est`` comes back the same and predicts bit for bit
    the same on each of ``inputs``."""
    expected = [out for X in inputs for out in outputs(est, X)]
    for loaded in round_trips(est, tmp_path, pickled):
        assert_same_estimator(est, loaded)
        got = [out for X in inputs for out in outputs(loaded, X)]
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)


# ---------------------------------------------------------------------- round trips
SENTENCE_CASES = {
    "none": ({}, TEXTS, None),
    "top-cnn-scores": (
        {"fine_tune": "top", "pooling": "cnn", "cnn_kernel_sizes": (1, 3), "cnn_channels": 4},
        PAIRS,
        SCORES,
    ),
    "full-pair-labels": ({"fine_tune": "full", "layer": (1, 2)}, PAIRS, LABELS),
}


@pytest.mark.parametrize("case", list(SENTENCE_CASES))
def test_sentence_transformer_round_trip(tiny_model, tmp_path, case):
    params, X, y = SENTENCE_CASES[case]
    est = BertSentenceTransformer(tiny_model, **TRAIN, **params).fit(X, y)
    if case == "full-pair-labels":
        assert isinstance(est.output_layer_, torch.nn.Linear)
    assert_round_trip(est, tmp_path, X, TEXTS)


@pytest.mark.parametrize(
    ("cls", "request_"), [(BertTextClassifier, True), (BertTextRegressor, "weights")]
)
def test_metadata_routing_requests_round_trip(tiny_bert, tmp_path, cls, request_):
    """What set_score_request set (as GridSearchCV's best_estimator_ keeps it) is saved as
    plain values and set again on load; an estimator with none saves none."""
    import sklearn

    y = LABELS if cls is BertTextClassifier else np.linspace(0.0, 1.0, len(TEXTS))
    with sklearn.config_context(enable_metadata_routing=True):
        est = cls(tiny_bert, **TRAIN).set_score_request(sample_weight=request_).fit(TEXTS, y)
        loaded = round_trips(est, tmp_path, pickled=False)[0]
    assert loaded._get_metadata_request().score.requests == {"sample_weight": request_}
    plain = cls(tiny_bert, **TRAIN).fit(TEXTS, y)
    plain.save(tmp_path / "plain")
    assert "_metadata_request" not in vars(skbert.load(tmp_path / "plain"))


def test_deferred_memory_fit_round_trip(tiny_model, tmp_path):
    memory = joblib.Memory(tmp_path / "cache", verbose=0)
    est = BertSentenceTransformer(tiny_model, device="cpu", memory=memory).fit(TEXTS)
    assert "network_" not in vars(est)  # fit fingerprinted the model, loaded no weights
    est.save(tmp_path / "saved")  # loads them
    loaded = skbert.load(tmp_path / "saved")
    assert "network_" in vars(loaded)
    assert_same_estimator(est, loaded)
    assert np.array_equal(loaded.transform(TEXTS), est.transform(TEXTS))
    assert_round_trip(est, tmp_path / "again", TEXTS)


CLASSIFIER_CASES = {
    "full": ({}, TEXTS, LABELS),
    "top": ({"fine_tune": "top"}, TEXTS, LABELS),
    "multilabel": ({}, TEXTS, MULTI),
    "string-labels": ({"class_weight": {"neg": 2.0, "pos": 1.0}}, PAIRS, WORDS),
    "chunks-attention": (
        {"truncation": "chunks", "max_length": 12, "chunk_pooling": "attention"},
        [LONG_TEXT, *TEXTS[1:]],
        LABELS,
    ),
}


@pytest.mark.parametrize("case", list(CLASSIFIER_CASES))
def test_classifier_round_trip(tiny_model, tmp_path, case):
    params, X, y = CLASSIFIER_CASES[case]
    clf = BertTextClassifier(tiny_model, **TRAIN, **params).fit(X, y)
    assert_round_trip(clf, tmp_path, X)
    loaded = skbert.load(tmp_path / "saved")
    if case == "string-labels":
        assert loaded.classes_.dtype == object and set(loaded.predict(X)) <= set(WORDS)
    if case == "full":  # the loaded model continues training exactly as the original does
        for est in (clf, loaded):
            est.set_params(warm_start=True).fit(X, y)
        assert np.array_equal(loaded.predict_proba(X), clf.predict_proba(X))


REGRESSOR_CASES = {
    "single-texts": ({"loss": "huber"}, TEXTS, SCORES),
    "multi-output-pairs": ({"fine_tune": "top"}, PAIRS, np.c_[SCORES, SCORES**2]),
    "one-column-cnn": ({"pooling": "cnn", "cnn_channels": 4}, TEXTS, SCORES[:, None]),
}


@pytest.mark.parametrize("case", list(REGRESSOR_CASES))
def test_regressor_round_trip(tiny_model, tmp_path, case):
    params, X, y = REGRESSOR_CASES[case]
    reg = BertTextRegressor(tiny_model, **TRAIN, **params).fit(X, y)
    assert_round_trip(reg, tmp_path, X)
    loaded = skbert.load(tmp_path / "saved")
    assert loaded.predict(X).shape == np.shape(y)
    assert loaded.target_mean_.dtype == np.float64 and loaded.multioutput_ == (np.ndim(y) == 2)
    for est in (reg, loaded):  # the loaded model continues training exactly as the original
        est.set_params(warm_start=True).fit(X, y)
    assert np.array_equal(loaded.predict(X), reg.predict(X))


def test_round_trip_of_special_parameters(tiny_bert, tmp_path):
    """model=fitted estimator (and FrozenEstimator), a RandomState, path-like memory, numpy
    ints, lists: each comes back as it was."""
    start = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    clf = BertTextClassifier(
        start,
        layer=(np.int64(1), 2),
        cnn_kernel_sizes=[1, 2],
        random_state=np.random.RandomState(3),
        **{k: v for k, v in TRAIN.items() if k != "random_state"},
    ).fit(TEXTS, LABELS)
    assert_round_trip(clf, tmp_path / "nested", TEXTS)
    assert (tmp_path / "nested" / "saved" / "model" / "skbert.json").is_file()
    frozen = BertTextClassifier(FrozenEstimator(start), **TRAIN).fit(TEXTS, LABELS)
    assert_round_trip(frozen, tmp_path / "frozen", TEXTS)
    start.set_output(transform="pandas")
    start.save(tmp_path / "pandas")
    frame = skbert.load(tmp_path / "pandas").transform(TEXTS)
    assert frame.equals(start.transform(TEXTS))
    for memory in (tmp_path / "cache", str(tmp_path / "cache")):
        est = BertSentenceTransformer(tiny_bert, device="cpu", memory=memory).fit(TEXTS)
        est.transform(TEXTS)
        assert_round_trip(est, tmp_path / type(memory).__name__, TEXTS)


PACKAGED_TEXTS = ["a gripping, beautiful film", "dull and far too long", "a joy", "two hours lost"]


@pytest.mark.real_model
@pytest.mark.parametrize("fine_tune", ["full", "top"])
def test_packaged_model_classifier_round_trip(packaged_model, tmp_path, fine_tune):
    clf = BertTextClassifier(packaged_model, max_length=16, fine_tune=fine_tune, **TRAIN)
    clf.fit(PACKAGED_TEXTS, [1, 0, 1, 0])
    assert_round_trip(clf, tmp_path / "clf", PACKAGED_TEXTS, pickled=False)


@pytest.mark.real_model
@pytest.mark.parametrize(
    "fine_tune, extra",
    [("none", {}), ("top", {"pooling": "cnn", "cnn_channels": 8}), ("full", {})],
)
def test_packaged_model_transformer_round_trip(packaged_model, tmp_path, fine_tune, extra):
    est = BertSentenceTransformer(packaged_model, max_length=16, device="cpu", **extra)
    if fine_tune == "none":
        est.fit(PACKAGED_TEXTS)
    else:
        shifted = PACKAGED_TEXTS[1:] + PACKAGED_TEXTS[:1]
        pairs = [[a, b] for a, b in zip(PACKAGED_TEXTS, shifted, strict=True)]
        est.set_params(fine_tune=fine_tune, **TRAIN).fit(pairs, [0.0, 1.0, 2.5, 5.0])
    assert est.normalize_  # the checkpoint's modules.json, resolved at fit: kept by the save
    assert_round_trip(est, tmp_path / "vectors", PACKAGED_TEXTS, pickled=False)


# ---------------------------------------------------------------------- the value codec
def test_codec_round_trips_every_value_type():
    values = {
        "floats": [math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324, 0.1],
        "ints and bools": (2**80, -1, True, False, None),
        "str": "ünï 東京 🙂\x00",
        "dict": {0: "a", "b": [1.0], (1, 2): None, np.int64(4): 1},
        "numpy scalars": [np.float32(1.5), np.float64(0.25), np.int8(-3), np.uint64(2**63)],
        "more scalars": [np.bool_(True), np.str_("label"), np.complex64(1 + 2j)],
        "arrays": [
            np.arange(6, dtype=np.float32).reshape(2, 3),
            np.array([np.nan, -0.0, np.inf]),
            np.array([1, -2], dtype=">i4"),
            np.array([True, False]),
            np.array([], dtype=np.int64),
            np.array(["a", "bcd"]),
            np.array(["x", 1, 2.5, True, np.int64(7)], dtype=object),
            np.zeros((0, 3), dtype=np.uint8),
        ],
    }
    node = SaveWriter(None, 0).encode(values, "values")
    text = json.dumps(node, allow_nan=False)  # valid JSON: no NaN tokens
    decoded = SaveReader(None, 0).decode(json.loads(text), "values")
    assert_same(values, decoded, "values")
    assert math.copysign(1.0, decoded["floats"][3]) == -1.0
    assert decoded["arrays"][2].dtype.str == ">i4"


@pytest.mark.parametrize(
    "value",
    [object(), {1, 2}, b"bytes", np.array([object()], dtype=object), np.array(["2024"], "M8[D]")],
)
def test_codec_refuses_what_it_cannot_store(value):
    with pytest.raises(TypeError, match="cannot save attr"):
        SaveWriter(None, 0).encode(value, "attr")


# ---------------------------------------------------------------------- save's contract
def test_save_refuses_unfitted_files_and_foreign_folders(tiny_bert, tmp_path):
    with pytest.raises(NotFittedError):
        BertSentenceTransformer(tiny_bert).save(tmp_path / "x")
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    (tmp_path / "file").write_text("mine")
    with pytest.raises(NotADirectoryError, match="give a new path or an empty folder, or a prev"):
        est.save(tmp_path / "file")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an skbert save"):
        est.save(tmp_path / "folder")
    assert (tmp_path / "folder" / "notes.txt").read_text() == "mine"
    # a file named like the manifest is not a save: the folder is the user's, not replaced
    (tmp_path / "folder" / "skbert.json").write_text('{"experiment": 3}')
    with pytest.raises(FileExistsError, match="not an skbert save"):
        est.save(tmp_path / "folder")
    assert sorted(p.name for p in (tmp_path / "folder").iterdir()) == ["notes.txt", "skbert.json"]
    # a link to a save: renaming the link would leave the save it names as it was
    est.save(tmp_path / "v1")
    (tmp_path / "latest").symlink_to(tmp_path / "v1")
    with pytest.raises(FileExistsError, match="symbolic link; .*give the folder it points to"):
        est.save(tmp_path / "latest")
    assert (tmp_path / "latest").is_symlink()
    (tmp_path / "empty").mkdir()
    est.save(tmp_path / "empty")
    assert skbert.load(tmp_path / "empty").transform(TEXTS).shape == est.transform(TEXTS).shape


def test_save_replaces_a_previous_save(tiny_bert, tmp_path):
    first = BertSentenceTransformer(tiny_bert, device="cpu", pooling="cls").fit(TEXTS)
    second = BertSentenceTransformer(tiny_bert, device="cpu", pooling="max").fit(TEXTS)
    first.save(tmp_path / "m")
    second.save(tmp_path / "m")
    assert skbert.load(tmp_path / "m").pooling == "max"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary folders left


@pytest.mark.parametrize("path", [".", "..", "sub/.."])  # "": tests/test_storage.py
def test_save_refuses_the_working_directory_and_the_folders_above_it(
    tiny_bert, tmp_path, monkeypatch, path
):
    """A save replaces its folder as a whole: the working directory (a previous save there,
    or an empty one) was renamed away and deleted from under the process."""
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    working = tmp_path / "work" / "here"
    (working / "sub").mkdir(parents=True)
    monkeypatch.chdir(working)
    with pytest.raises(ValueError, match="is the working directory or a folder above it"):
        est.save(path)
    assert Path.cwd() == working and (working / "sub").is_dir()
    assert est.save("model") == "model"  # a folder inside it is fine
    assert skbert.load("model").transform(TEXTS).shape == est.transform(TEXTS).shape


def test_save_and_load_expand_the_home_folder(tiny_bert, tmp_path, monkeypatch):
    """As model= does: '~/m' is the home folder's m, not a folder named '~'."""
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert est.save("~/m") == "~/m"
    assert (tmp_path / "home" / "m" / "skbert.json").is_file()
    assert not (tmp_path / "~").exists()
    np.testing.assert_array_equal(skbert.load("~/m").transform(TEXTS), est.transform(TEXTS))


def test_a_long_folder_name_saves_and_its_interrupted_replacement_is_named(tiny_bert, tmp_path):
    """The temporary sibling of a 220-character name (valid alone) was over the 255 bytes a
    file name may have; a save killed between its two renames left the previous save aside
    under a hidden name that load did not mention."""
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    target = tmp_path / ("m" * 220)
    est.save(target)
    est.save(target)  # replaces it: the previous one is kept aside until the rename
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    aside = tmp_path / f".{target.name[:100]}.old-0123456789abcdef"
    target.rename(aside)  # as a save interrupted between its two renames leaves it
    with pytest.raises(
        FileNotFoundError, match=r"no such folder\. A save there was interrupted"
    ) as info:
        skbert.load(target)
    assert repr(str(aside)) in str(info.value)


def test_an_attribute_that_cannot_be_stored_fails_the_save_and_leaves_nothing(tiny_bert, tmp_path):
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    est.extra_ = {"callback": print}
    with pytest.raises(TypeError, match=r"extra_\['callback'\]"):
        est.save(tmp_path / "m")
    assert list(tmp_path.iterdir()) == []  # no folder that loads, no partial folder


# ---------------------------------------------------------------------- loading safely
@pytest.fixture(scope="module")
def fitted(tiny_bert):
    """A fitted classifier; tests that change it take a copy."""
    return BertTextClassifier(tiny_bert, **TRAIN).fit(TEXTS, LABELS)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, fitted):
    """A saved fitted classifier (to copy and tamper with)."""
    folder = tmp_path_factory.mktemp("saved") / "clf"
    fitted.save(folder)
    return folder


def tampered(saved, tmp_path, edit):
    folder = tmp_path / "tampered"
    shutil.copytree(saved, folder)
    manifest = json.loads((folder / "skbert.json").read_text())
    edit(manifest)
    (folder / "skbert.json").write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize(
    "config",
    [
        {"backbone": "attacker/probe-repo", "use_pretrained_backbone": False},
        {"use_timm_backbone": True},
    ],
)
def test_load_builds_no_backbone_that_loads_another_model(saved, tmp_path, monkeypatch, config):
    """A tampered description naming a model type whose configuration loads another model
    (DETR's vision backbone) made load ask the hub for a repository the file named; a
    configuration transformers cannot build raised its own errors, not load's ValueError."""
    import huggingface_hub

    asked = []
    monkeypatch.setattr(
        huggingface_hub.HfApi, "repo_exists", lambda self, repo_id, **kw: asked.append(repo_id)
    )

    def edit(manifest):
        backbone = manifest["fitted"]["network_"]["description"]["backbone"]
        backbone.update(model_type="detr", config=config)

    with pytest.raises(ValueError, match="names another model to load") as info:
        skbert.load(tampered(saved, tmp_path, edit))
    assert str(tmp_path) in str(info.value) and asked == []

    def unbuildable(manifest):
        backbone = manifest["fitted"]["network_"]["description"]["backbone"]
        backbone["config"].update(num_attention_heads=0)  # transformers: ZeroDivisionError

    with pytest.raises(ValueError, match="transformers cannot build the saved backbone"):
        skbert.load(tampered(saved, tmp_path / "2", unbuildable))


@pytest.mark.parametrize("name", ["os.system", "builtins.eval", "BaseEstimator", None])
def test_load_builds_only_allowed_classes(saved, tmp_path, name):
    folder = tampered(saved, tmp_path, lambda m: m.update({"class": name}))
    with pytest.raises(ValueError, match=r"not an estimator skbert loads") as info:
        skbert.load(folder)
    assert str(folder) in str(info.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["fitted"].update(x_={"type": "os.system", "value": "ls"}), "unknown value"),
        (lambda m: m["fitted"]["tokenizer_"].update(folder="../../etc"), "not a file name"),
        (lambda m: m["fitted"]["network_"].update(file="/etc/passwd"), "not a file name"),
        (lambda m: m["fitted"]["network_"]["description"].update(kind="Popen"), "kind="),
        (lambda m: m["params"].update(shell={"type": "str", "value": "ls"}), "no parameters"),
        (lambda m: m.update(format_version=99), "upgrade skbert"),
        (lambda m: m["fitted"].update(__class__={"type": "none"}), "not names of fitted"),
        (lambda m: m["fitted"].pop("network_"), r"attributes \['network_'\] are missing"),
        (lambda m: m["fitted"].pop("classes_"), r"attributes \['classes_'\] are missing"),
    ],
)
def test_load_refuses_tampered_manifests(saved, tmp_path, edit, message):
    folder = tampered(saved, tmp_path, edit)
    with pytest.raises(ValueError, match=message):
        skbert.load(folder)


def test_load_errors_name_the_path(saved, tmp_path):
    for path in (None, 123, b"clf"):
        with pytest.raises(TypeError, match=rf"path={path!r} is not a folder path"):
            skbert.load(path)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        skbert.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty.*no skbert.json"):
        skbert.load(tmp_path / "empty")
    with pytest.raises(NotADirectoryError, match="skbert.json"):
        skbert.load(saved / "skbert.json")
    cases = [  # (file to damage, new content or None to delete, what the error names)
        ("skbert.json", b'{"format": "skbert-estimator", "format_ver', "skbert.json"),
        ("network_.safetensors", b"\x80\x04garbage", "network_.safetensors"),
        ("tokenizer_/tokenizer.json", b"{garbage", "tokenizer_"),
        ("tokenizer_", None, "tokenizer_"),
    ]
    for i, (name, content, named) in enumerate(cases):
        folder = tmp_path / f"corrupt-{i}"
        shutil.copytree(saved, folder)
        if content is None:
            shutil.rmtree(folder / name)
        else:
            (folder / name).write_bytes(content)
        with pytest.raises(ValueError, match=re.escape(str(folder))) as info:
            skbert.load(folder)
        assert named in str(info.value)


def test_load_refuses_weights_whose_bytes_changed(fitted, saved, tmp_path):
    """One flipped byte of the output layer's weights loaded without a word and moved
    predict_proba; eight 0xff bytes gave NaN probabilities and still a label."""
    folder = tmp_path / "flipped"
    shutil.copytree(saved, folder)
    weights = folder / "network_.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x10  # a weight's bits, past the header: still a valid safetensors file
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"network_.safetensors' is damaged: its bytes"):
        skbert.load(folder)
    # saves written before the digest was recorded load as they did
    unchecked = tampered(saved, tmp_path, lambda m: m["fitted"]["network_"].pop("blake2b"))
    loaded = skbert.load(unchecked)
    assert np.array_equal(loaded.predict_proba(TEXTS), fitted.predict_proba(TEXTS))


def test_load_refuses_tokenizer_files_that_changed(fitted, saved, tmp_path):
    """Two words' ids swapped in tokenizer.json loaded without a word (the probe's few texts
    do not hold them) and changed predict_proba; a deleted file was reported as a tokenizer
    of another version."""
    folder = tmp_path / "swapped"
    shutil.copytree(saved, folder)
    path = folder / "tokenizer_" / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    vocab["dog"], vocab["film"] = vocab["film"], vocab["dog"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"tokenizer.json' is damaged: its bytes are not"):
        skbert.load(folder)
    for change, named in [
        ("unlink", r"\(missing \['tokenizer.json'\]\)"),
        ("add", r"\(added \['added_tokens.json'\]\)"),
    ]:
        folder = tmp_path / change
        shutil.copytree(saved, folder)
        if change == "unlink":
            (folder / "tokenizer_" / "tokenizer.json").unlink()
        else:
            (folder / "tokenizer_" / "added_tokens.json").write_text('{"dog": 5}')
        with pytest.raises(ValueError, match=rf"does not hold the files save wrote {named}"):
            skbert.load(folder)
    # saves written before the digests were recorded load as they did
    unchecked = tampered(saved, tmp_path, lambda m: m["fitted"]["tokenizer_"].pop("blake2b"))
    assert np.array_equal(skbert.load(unchecked).predict_proba(TEXTS), fitted.predict_proba(TEXTS))


def test_a_tokenizer_that_reads_back_otherwise_is_refused_by_save_and_load(
    fitted, saved, tmp_path, monkeypatch
):
    """The probe of the tokenizer, written and read back (another transformers or tokenizers
    version, or a tokenizer whose save_pretrained loses something): refused both ways."""
    from skbert._estimator.persistence import codec

    unchecked = tampered(saved, tmp_path, lambda m: m["fitted"]["tokenizer_"].pop("blake2b"))
    other = codec.read_tokenizer(unchecked / "tokenizer_")
    other.add_tokens(["filmdog"])  # encodes one of the probe's texts otherwise
    monkeypatch.setattr(codec, "tokenizer_probe", lambda tok: len(tok.get_vocab()))
    monkeypatch.setattr(codec, "read_tokenizer", lambda folder: other)
    with pytest.raises(TypeError, match=r"read back with AutoTokenizer, encodes texts differ"):
        fitted.save(tmp_path / "m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tampered"]  # nothing left
    with pytest.raises(ValueError, match="read back encodes texts differently from the saved"):
        skbert.load(unchecked)


def test_a_failed_rename_puts_the_previous_save_back(fitted, saved, tmp_path, monkeypatch):
    from skbert._storage import files

    folder = tmp_path / "m"
    shutil.copytree(saved, folder)
    renames = []
    replace = os.replace

    def failing(source, target):
        renames.append((Path(source).name, Path(target).name))
        if len(renames) == 2:  # the new folder into place
            raise OSError("disk full")
        replace(source, target)

    monkeypatch.setattr(files.os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        BertTextClassifier(fitted.model, **TRAIN).fit(TEXTS, LABELS[::-1]).save(folder)
    assert [target for _, target in renames] == [renames[0][1], "m", "m"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # back, nothing left aside
    np.testing.assert_array_equal(
        skbert.load(folder).predict_proba(TEXTS), fitted.predict_proba(TEXTS)
    )


class _Payload:
    """Unpickling this touches a marker file: code running from the bytes."""

    def __init__(self, marker):
        self.marker = Path(marker)

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_unpickling_never_runs_code_from_the_network_bytes(fitted, tmp_path, monkeypatch):
    clf = copy.deepcopy(fitted)
    marker = tmp_path / "pwned"
    buffer = io.BytesIO()
    torch.save(_Payload(marker), buffer)  # an earlier skbert pickled the network like this
    malicious = [buffer.getvalue(), {"format": "skbert-network", "description": "{}"}]
    malicious[1]["tensors"] = pickle.dumps(_Payload(marker))
    for network in malicious:
        state = {**clf.__getstate__(), "network_": network}
        with monkeypatch.context() as patch:
            patch.setattr(BertTextClassifier, "__getstate__", lambda self, s=state: s)
            blob = pickle.dumps(clf)
        refused = None
        try:
            pickle.loads(blob)
        except ValueError as exc:
            refused = exc
        assert not marker.exists(), "unpickling ran code stored in the network bytes"
        assert refused is not None and "network_" in str(refused)


def _pickle_globals(blob: bytes) -> set:
    """The module-level names a pickle imports (what unpickling it calls)."""
    import pickletools

    found, strings = set(), []
    for opcode, arg, _ in pickletools.genops(blob):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif opcode.name == "STACK_GLOBAL":
            found.add(".".join(strings[-2:]))
        elif opcode.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
    return found


def test_a_softmax_objectives_output_layer_is_pickled_without_torch(tiny_bert):
    """output_layer_ (a torch.nn.Linear) was pickled by torch's reducer, whose unpickling
    calls torch.load(weights_only=False): the pickle now imports nothing of torch."""
    est = BertSentenceTransformer(tiny_bert, **TRAIN, fine_tune="full").fit(PAIRS, LABELS)
    assert isinstance(est.output_layer_, torch.nn.Linear)
    blob = pickle.dumps(est)
    assert not {name for name in _pickle_globals(blob) if name.startswith("torch")}
    again = pickle.loads(blob)
    assert type(again.output_layer_) is torch.nn.Linear
    assert again.output_layer_.training == est.output_layer_.training
    for name, value in est.output_layer_.state_dict().items():
        assert torch.equal(again.output_layer_.state_dict()[name], value), name


def test_pickled_network_is_json_and_safetensors(fitted):
    state = fitted.__getstate__()
    network = state["network_"]
    assert network["format"] == "skbert-network"
    assert json.loads(network["description"])["kind"] == "TaskNetwork"
    from safetensors.torch import load as load_tensors

    assert "encoder.backbone.embeddings.word_embeddings.weight" in load_tensors(network["tensors"])


# ---------------------------------------------------------------------- GPU-fitted, CPU here
needs_no_cuda = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="simulates a GPU-fitted model on a machine without CUDA; this machine has CUDA",
)


def fallback_messages(*calls) -> list:
    """The CPU-fallback warnings given while running ``calls``."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for call in calls:
            call()
    return [str(w.message) for w in record if FALLBACK in str(w.message)]


@needs_no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_unavailable_device_predicts_on_the_cpu_and_warns_once(fitted, tmp_path, device):
    clf = copy.deepcopy(fitted)
    expected = clf.predict_proba(TEXTS)  # fp32 on the CPU
    clf.set_params(device=device)  # as fitted on a GPU (precision="auto": bf16 there)
    for est in [clf, *round_trips(clf, tmp_path)]:

        def predict(est=est):
            assert np.array_equal(est.predict_proba(TEXTS), expected)

        messages = fallback_messages(predict, predict, lambda est=est: est.predict(TEXTS))
        assert messages == [
            f"device={device!r} {FALLBACK}. set_params(device='cpu') silences this."
        ]
        assert est.get_params()["device"] == device  # not edited
    with pytest.raises(RuntimeError, match="not available"):
        clf.fit(TEXTS, LABELS)  # training still needs the device


@needs_no_cuda
def test_unavailable_device_transform_with_and_without_cache(tiny_bert, tmp_path):
    for cached in (False, True):
        memory = [tmp_path / "reference", tmp_path / "cache"] if cached else [None, None]
        reference = BertSentenceTransformer(tiny_bert, device="cpu", memory=memory[0])
        expected = reference.fit(TEXTS).transform(TEXTS)  # on the CPU, as it was computed
        est = BertSentenceTransformer(tiny_bert, device="cpu", memory=memory[1]).fit(TEXTS)
        est.set_params(device="cuda")

        def transform(est=est, expected=expected):
            assert np.array_equal(est.transform(TEXTS), expected)

        # with a cache: the first call encodes (the cache key and the encoder both resolve the
        # device), the second reads the cache
        assert len(fallback_messages(transform, transform)) == 1
        loaded = pickle.loads(pickle.dumps(est))
        assert len(fallback_messages(lambda est=loaded: transform(est))) == 1


# ---------------------------------------------------------------------- the class registry
@pytest.fixture
def registry(monkeypatch):
    """The registry of estimator classes, restored after the test (classes a test defines
    leave with it)."""
    from skbert._estimator.persistence import registry

    monkeypatch.setattr(registry, "_CLASSES", dict(registry._CLASSES))
    return registry


def test_skbert_estimators_are_registered_by_import(registry):
    assert registry.registered_names() == (
        "BertSentenceTransformer",
        "BertTextClassifier",
        "BertTextRegressor",
    )
    assert registry.estimator_class("BertTextClassifier") is BertTextClassifier
    assert registry.estimator_class("BertTextRegressor") is BertTextRegressor
    assert registry.estimator_class("BertSentenceTransformer") is BertSentenceTransformer


def test_a_subclass_defined_at_runtime_registers_and_round_trips(registry, tiny_bert, tmp_path):
    class MyClassifier(BertTextClassifier):
        pass

    assert registry.estimator_class("MyClassifier") is MyClassifier
    clf = MyClassifier(tiny_bert, **TRAIN).fit(TEXTS, LABELS)
    loaded = skbert.load(clf.save(tmp_path / "mine"))
    assert type(loaded) is MyClassifier
    assert np.array_equal(loaded.predict_proba(TEXTS), clf.predict_proba(TEXTS))
    # a folder naming a class no longer registered fails as any unknown class does
    registry._CLASSES.pop("MyClassifier")
    with pytest.raises(ValueError, match=r"class='MyClassifier' is not an estimator skbert") as e:
        skbert.load(tmp_path / "mine")
    assert "allowed: BertSentenceTransformer, BertTextClassifier, BertTextRegressor" in str(e.value)
    assert str(tmp_path / "mine") in str(e.value)
    # the save is sound: the message says to define the class, not that the folder is bad
    assert "holds a save whose class=" in str(e.value) and "not a valid" not in str(e.value)
    assert "import the module that defines it before loading" in str(e.value)


def test_private_and_shadowing_subclasses_are_not_registered(registry, fitted, saved, tmp_path):
    class _Helper(BertTextClassifier):
        pass

    def shadow():
        class BertTextClassifier(skbert.BertTextClassifier):  # the same name, another class
            pass

        return BertTextClassifier

    shadowing = shadow()
    assert "_Helper" not in registry.registered_names()
    assert registry.estimator_class("BertTextClassifier") is skbert.BertTextClassifier
    assert type(skbert.load(saved)) is skbert.BertTextClassifier  # not taken over
    for i, cls in enumerate((_Helper, shadowing)):
        est = copy.deepcopy(fitted)
        est.__class__ = cls
        with pytest.raises(TypeError, match="cannot save the estimator: .*only the registered"):
            est.save(tmp_path / f"m{i}")
        assert not (tmp_path / f"m{i}").exists()


def test_a_class_statement_run_again_replaces_its_registration(registry):
    namespace = {"BertTextClassifier": BertTextClassifier, "__name__": "notebook"}
    source = "class Again(BertTextClassifier):\n    pass\n"
    exec(source, namespace)
    first = namespace["Again"]
    exec(source, namespace)
    assert namespace["Again"] is not first
    assert registry.estimator_class("Again") is namespace["Again"]


# ---------------------------------------------------------------------- network state
def assert_same_network(a, b) -> None:
    assert_same(a, b, "network")
    x = {"input_ids": torch.tensor([[2, 5, 7, 9, 3], [2, 6, 8, 3, 0]])}
    x["attention_mask"] = (x["input_ids"] != 0).long()
    with torch.inference_mode():
        assert torch.equal(a(**x), b(**x))


@pytest.mark.parametrize("kind", ["encoder-cnn", "task-network"])
def test_network_state_round_trip(tiny_bert, kind):
    from skbert._nn.state import network_from_state, network_to_state

    if kind == "encoder-cnn":
        params = {"fine_tune": "top", "pooling": "cnn", "cnn_kernel_sizes": (1, 3)}
        est = BertSentenceTransformer(tiny_bert, cnn_channels=4, **TRAIN, **params)
        network = est.fit(PAIRS, SCORES).network_
    else:
        network = BertTextClassifier(tiny_bert, layer=(1, 2), **TRAIN).fit(TEXTS, LABELS).network_
    state = network_to_state(network)
    assert set(state) == {"format", "description", "tensors"}
    assert type(state["description"]) is str and type(state["tensors"]) is bytes
    rng = torch.random.get_rng_state()
    rebuilt = network_from_state(pickle.loads(pickle.dumps(state)))
    assert torch.equal(torch.random.get_rng_state(), rng)  # new modules draw from their own
    assert type(rebuilt) is type(network)
    assert_same_network(network, rebuilt)


def test_deepcopy_of_a_network_is_plain_and_exact(fitted):
    """transformers 5 hooks (local functions) do not pickle, but deepcopy shares them; a copy
    stays where and as it is and draws nothing from torch's RNG."""
    network = fitted.network_
    fitted.predict_proba(TEXTS)  # a forward pass installs the hooks (transformers 5)
    if any(module._forward_hooks for module in network.modules()):
        with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
            pickle.dumps(network.backbone)
    rng = torch.random.get_rng_state()
    copied = copy.deepcopy(network)
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert_same_network(network, copied)
    first = next(copied.parameters())
    with torch.no_grad():
        first.add_(1.0)  # the copy is independent
    assert not torch.equal(first, next(network.parameters()))


def test_fitted_network_is_the_seam_of_a_fitted_estimator(tiny_bert, tmp_path):
    with pytest.raises(NotFittedError):
        BertTextClassifier(tiny_bert).fitted_network()
    est = BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path).fit(TEXTS)
    assert "network_" not in vars(est)
    network = est.fitted_network()  # a deferred fit loads it here, into the prediction cache
    assert "network_" not in vars(est) and est.fitted_network() is network
    from skbert._estimator.model_source import load_encoder

    for model in (est, FrozenEstimator(est)):  # model=fitted: copies, through the seam
        tokenizer, backbone = load_encoder(model)
        assert backbone is not network.backbone and tokenizer is not est.tokenizer_
        assert not backbone.training
        assert_same(backbone, network.backbone, "backbone")
        assert tokenizer(TEXTS[0])["input_ids"] == est.tokenizer_(TEXTS[0])["input_ids"]


def test_version_is_the_packages_and_saves_record_it(saved):
    from conftest import REPO

    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'(?m)^version = "([^"]+)"', text).group(1) == skbert.__version__
    manifest = json.loads((saved / "skbert.json").read_text(encoding="utf-8"))
    assert manifest["skbert_version"] == skbert.__version__
