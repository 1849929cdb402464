"""Fetching the data sets from their sources, with the sources served from local files.

The code path is the real one (urllib, archives, checksums, atomic writes); only the URLs point
at archives built here in the canonical layouts, since tests never use the network.
"""

import hashlib
import io
import json
import tarfile
import zipfile

import pytest

from skbert._storage.fetch import SOURCES
from skbert.datasets import load_imdb_sample, load_snli, load_sst2, load_stsb, load_trec

STS_ROW = "main-captions\tMSRvid\t2012test\t0001\t{score}\tA plane is taking off.\tAn air plane is taking off.\n"  # noqa: E501


def tar_gz(files):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def snli_row(label, s1, s2):
    parse = lambda s: "( " + " ".join(s.split()) + " )"  # noqa: E731
    return json.dumps(
        {
            "gold_label": label,
            "sentence1": s1,
            "sentence2": s2,
            "sentence1_binary_parse": parse(s1),
            "sentence2_binary_parse": parse(s2),
        }
    )


@pytest.fixture
def sources(tmp_path, monkeypatch):
    served = tmp_path / "served"
    served.mkdir()

    def serve(name, data):
        (served / name).write_bytes(data)
        return (served / name).as_uri()

    stsb = tar_gz(
        {
            f"stsbenchmark/sts-{s}.csv": STS_ROW.format(score=5.0 - i)
            for i, s in enumerate(("train", "dev", "test"))
        }
    )
    imdb = tar_gz(
        {
            "imdb_sample/texts.csv": "label,text,is_valid\n"
            "negative,Dull.<br />Very dull.,False\npositive,Lovely!,True\n"
        }
    )
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        for split in ("train", "dev", "test"):
            rows = [
                snli_row("entailment", "A man sleeps .", "A person rests ."),
                snli_row("-", "No consensus .", "None ."),
                snli_row("contradiction", "A dog runs .", "A cat sleeps ."),
            ]
            archive.writestr(f"snli_1.0/snli_1.0_{split}.jsonl", "\n".join(rows) + "\n")
    patched = {
        "stsb": (serve("sts.tgz", stsb), hashlib.md5(stsb).hexdigest(), "STS-B"),
        "sst2-senteval": (
            {
                f"sentiment-{s}": serve(f"sst-{s}", b"a fine film .\t1\n")
                for s in ("train", "dev", "test")
            },
            None,
            "SST-2",
        ),
        "trec": (
            {
                n: serve(n, b"NUM:dist How far is it ?\n")
                for n in ("train_5500.label", "TREC_10.label")
            },
            None,
            "TREC",
        ),
        "imdb-sample": (serve("imdb.tgz", imdb), None, "IMDb"),
        "snli-senteval": (serve("snli.zip", zipped.getvalue()), None, "SNLI"),
    }
    for name, source in patched.items():
        monkeypatch.setitem(SOURCES, name, source)
    return tmp_path / "home"


def test_every_loader_fetches_when_missing(sources):
    home = sources
    X, y = load_stsb("dev", data_home=home, return_X_y=True, download_if_missing=True)
    assert X.tolist() == [["A plane is taking off.", "An air plane is taking off."]]
    assert y.tolist() == [4.0]
    assert load_sst2("test", data_home=home, download_if_missing=True).target.tolist() == [1]
    assert load_trec(data_home=home, download_if_missing=True).target.tolist() == ["NUM"]
    bunch = load_imdb_sample("train", data_home=home, download_if_missing=True)
    assert bunch.data.tolist() == ["Dull. Very dull."]
    X, y = load_snli("test", data_home=home, return_X_y=True, download_if_missing=True)
    assert y.tolist() == ["entailment", "contradiction"]  # the no-consensus pair dropped
    assert X[1].tolist() == ["A dog runs .", "A cat sleeps ."]
    assert sorted(p.name for p in (home / "stsb").iterdir()) == [
        "sts-dev.csv",
        "sts-test.csv",
        "sts-train.csv",
    ]


def test_missing_files_without_download_and_bad_checksum(sources, monkeypatch):
    with pytest.raises(FileNotFoundError, match="download_if_missing=True"):
        load_stsb(data_home=sources)
    url, _, name = SOURCES["stsb"]
    monkeypatch.setitem(SOURCES, "stsb", (url, "0" * 32, name))
    with pytest.raises(OSError, match="checksum mismatch"):
        load_stsb(data_home=sources, download_if_missing=True)
    monkeypatch.setitem(SOURCES, "trec", ({"TREC_10.label": url + ".gone"}, None, "T"))
    with pytest.raises(OSError, match="Could not download T .* put its files in"):
        load_trec("test", data_home=sources, download_if_missing=True)
