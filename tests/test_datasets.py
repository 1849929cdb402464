"""Loaders on the shared evaluation data, and their errors."""

import numpy as np
import pytest

from skbert.datasets import (
    get_data_home,
    load_demo_sentiment,
    load_imdb_sample,
    load_snli,
    load_sst2,
    load_stsb,
    load_trec,
)


def test_demo_sample_is_bundled_and_balanced():
    X, y = load_demo_sentiment(return_X_y=True)
    assert X.shape == (400,) and set(y) == {0, 1} and y.sum() == 200
    assert all(isinstance(t, str) and t for t in X)


@pytest.mark.shared_data
@pytest.mark.parametrize("split, n", [("train", 5749), ("dev", 1500), ("test", 1379)])
def test_stsb(data_home, split, n):
    bunch = load_stsb(split, data_home=data_home)
    assert bunch.data.shape == (n, 2) and bunch.target.shape == (n,)
    assert bunch.target.min() >= 0 and bunch.target.max() <= 5
    # one spelling of each genre in every split (the training file writes "main-forum")
    assert set(bunch.genre) == {"main-captions", "main-forums", "main-news"}


@pytest.mark.shared_data
@pytest.mark.parametrize("split, n", [("train", 67349), ("dev", 872), ("test", 1821)])
def test_sst2(data_home, split, n):
    X, y = load_sst2(split, data_home=data_home, return_X_y=True)
    assert X.shape == (n,) and set(np.unique(y)) == {0, 1}


@pytest.mark.shared_data
def test_imdb_sample(data_home):
    X, y = load_imdb_sample("train", data_home=data_home, return_X_y=True)
    X_valid, _ = load_imdb_sample("valid", data_home=data_home, return_X_y=True)
    assert len(X) == 800 and len(X_valid) == 200
    assert set(y) == {"negative", "positive"}
    assert not any("<br />" in text for text in X)


@pytest.mark.shared_data
def test_trec(data_home):
    X, y = load_trec("train", data_home=data_home, return_X_y=True)
    assert X.shape == (5452,) and len(set(y)) == 6
    assert len(set(load_trec("train", data_home=data_home, fine=True).target)) == 50
    X_test, _ = load_trec("test", data_home=data_home, return_X_y=True)
    assert X_test.shape == (500,) and X_test[0] == "How far is it from Denver to Aspen ?"


@pytest.mark.shared_data
@pytest.mark.parametrize("split, n", [("dev", 9842), ("test", 9824)])
def test_snli(data_home, split, n):
    X, y = load_snli(split, data_home=data_home, return_X_y=True)
    assert X.shape == (n, 2)
    assert set(y) == {"entailment", "neutral", "contradiction"}


def test_data_home_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SKBERT_DATA", str(tmp_path))
    assert get_data_home() == tmp_path
    assert get_data_home("/elsewhere").as_posix() == "/elsewhere"
    monkeypatch.setenv("SKBERT_DATA", "")  # set but empty: unset, not the current folder
    assert get_data_home() == get_data_home("~/skbert_data")


def test_missing_files_say_where_to_put_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"stsb.*SKBERT_DATA.*the folder that holds stsb/"):
        load_stsb("test", data_home=tmp_path)


def test_bad_split(tmp_path):
    with pytest.raises(ValueError, match="split='validation' is not allowed"):
        load_sst2("validation", data_home=tmp_path)
    with pytest.raises(ValueError, match=r"split=\['train'\] is not allowed"):  # was TypeError
        load_stsb(["train"], data_home=tmp_path)


@pytest.mark.parametrize(
    ("loader", "flag"),
    [
        ("load_trec", "fine"),
        ("load_imdb_sample", "clean_html"),
        ("load_stsb", "download_if_missing"),
        ("load_snli", "return_X_y"),
        ("load_sst2", "return_X_y"),
        ("load_demo_sentiment", "return_X_y"),
    ],
)
def test_a_flag_that_is_not_a_bool_is_refused(data_home, loader, flag):
    """load_trec(fine="False") gave the 50 fine classes; download_if_missing="no" fetched."""
    import skbert.datasets

    load = getattr(skbert.datasets, loader)
    where = {} if loader == "load_demo_sentiment" else {"data_home": data_home}
    with pytest.raises(TypeError, match=rf"{flag}='False' is not allowed; use True or False"):
        load(**where, **{flag: "False"})
    assert load(**where, **{flag: np.bool_(False)}) is not None  # numpy's bools are bools


def test_a_data_home_that_is_not_a_path_is_named():
    with pytest.raises(TypeError, match="data_home=123 is not a folder path"):
        load_stsb("test", data_home=123)


def test_export_onnx_is_listed_without_being_imported():
    import subprocess
    import sys

    code = "import skbert, sys; print('export_onnx' in dir(skbert), 'skbert.onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_data_home_without_a_home_folder_says_what_to_set(monkeypatch):
    """HOME unset and a user id without a passwd entry (a container run as an arbitrary uid):
    pathlib's bare "Could not determine home directory." named neither data_home nor
    SKBERT_DATA."""
    import pwd

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("SKBERT_DATA", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(RuntimeError, match=r"'~/skbert_data' starts with ~.*SKBERT_DATA"):
        get_data_home()
