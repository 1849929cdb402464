"""Storage: the atomic-write helper, and a feature cache whose files change under a process.

A shard changed after the process verified it (truncated in place, overwritten with NaN,
with its modification time set back, or its whole key folder deleted) is verified again and
never served: no crash, at most a warning, and the vectors of an uncached run.
"""

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import TEXTS

from skbert import BertSentenceTransformer
from skbert._storage import shards
from skbert._storage.feature_cache import FeatureCacheWarning, FeatureStore, text_digests
from skbert._storage.files import atomic_write, replace_folder, replaceable

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- atomic writes
def test_atomic_write_replaces_a_file_whole_and_returns_what_write_returned(tmp_path):
    path = tmp_path / "state.bin"
    path.write_bytes(b"old")
    assert atomic_write(path, lambda handle: handle.write(b"new bytes")) == 9
    assert path.read_bytes() == b"new bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.bin"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, error):
    path = tmp_path / "state.bin"
    path.write_bytes(b"old")
    seen = []

    def write(handle):
        handle.write(b"half of the new")
        seen.extend(p.name for p in tmp_path.iterdir() if p.name != "state.bin")
        raise error

    with pytest.raises(type(error)):
        atomic_write(path, write)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.bin"]
    [temporary] = seen  # a hidden name in the same folder, never a finished file's name
    assert temporary.startswith(".state.bin.") and temporary.endswith(".tmp")


@pytest.mark.parametrize("durable", [True, False])
def test_atomic_write_syncs_to_disk_only_when_durable(tmp_path, monkeypatch, durable):
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    atomic_write(tmp_path / "f", lambda handle: handle.write(b"x"), durable=durable)
    assert len(synced) == (2 if durable else 0)  # the file, then its folder


def test_replace_folder_swaps_a_previous_folder(tmp_path):
    def is_previous(folder):
        return (folder / "MANIFEST").is_file() and (folder / "MANIFEST").read_text() == "old"

    target, partial = tmp_path / "save", tmp_path / ".save.partial"
    assert replaceable(target, is_previous)
    target.mkdir()
    assert replaceable(target, is_previous)  # empty
    (target / "MANIFEST").write_text("old")
    (target / "notes").write_text("old")
    assert replaceable(target, is_previous)
    (tmp_path / "link").symlink_to(target)
    assert not replaceable(tmp_path / "link", is_previous)
    (tmp_path / "link").unlink()
    partial.mkdir()
    (partial / "MANIFEST").write_text("new")
    replace_folder(partial, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["save"]
    assert sorted(p.name for p in target.iterdir()) == ["MANIFEST"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "mine.txt").write_text("mine")
    assert not replaceable(tmp_path / "other", is_previous)


# ---------------------------------------------------------------------- shards that change
TEXTS_400 = [f"sentence number {i}: {TEXTS[i % len(TEXTS)]}" for i in range(400)]


def cache_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, FeatureCacheWarning)]


def values_file(root):
    [path] = Path(root).rglob("*.vals.npy")
    return path


@pytest.fixture(scope="module")
def uncached(tiny_bert):
    return BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS).transform(TEXTS)


def test_a_shard_truncated_while_in_use_does_not_kill_the_process(tiny_bert, tmp_path):
    """The shard is truncated between two transforms of one process, which read it: a memory
    map of it would raise SIGBUS there. In a subprocess, so that a crash fails the test."""
    script = textwrap.dedent(
        f"""
        import os, sys, warnings
        from pathlib import Path
        import numpy as np
        from skbert import BertSentenceTransformer
        from skbert.exceptions import FeatureCacheWarning

        texts = {TEXTS_400!r}
        root = Path({str(tmp_path / "cache")!r})
        expected = BertSentenceTransformer({tiny_bert!r}, device="cpu").fit(texts).transform(texts)
        est = BertSentenceTransformer({tiny_bert!r}, device="cpu", memory=root).fit(texts)
        np.testing.assert_array_equal(est.transform(texts), expected)
        np.testing.assert_array_equal(est.transform(texts), expected)  # read from the shard
        [values] = root.rglob("*.vals.npy")
        size = values.stat().st_size
        assert size > 16 * 4096, size  # pages past the new end exist
        os.truncate(values, size // 2)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            again = est.transform(texts)
        messages = [str(w.message) for w in record if w.category is FeatureCacheWarning]
        assert len(messages) == 1 and "bytes long" in messages[0], messages
        np.testing.assert_array_equal(again, expected)
        print("survived")
        """
    )
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "survived" in done.stdout


@pytest.mark.parametrize("set_mtime_back", [False, True])
def test_a_shard_overwritten_after_it_was_verified_is_verified_again(
    tiny_bert, uncached, tmp_path, set_mtime_back
):
    """Same size, same header, NaN values: caught by mtime, or with mtime set back (os.utime)
    by ctime, which no user can set."""
    est = BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path).fit(TEXTS)
    np.testing.assert_array_equal(est.transform(TEXTS), uncached)
    path = values_file(tmp_path)
    before = path.stat()
    stored = np.load(path)
    np.save(path, np.full_like(stored, np.nan))  # in place: same inode, same size
    if set_mtime_back:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = path.stat()
        assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.warns(FeatureCacheWarning, match="does not match its checksum") as record:
        again = est.transform(TEXTS)
    np.testing.assert_array_equal(again, uncached)
    assert len(cache_warnings(record)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureCacheWarning)
        fresh = BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path).fit(TEXTS)
        np.testing.assert_array_equal(fresh.transform(TEXTS), uncached)
    assert "network_" not in vars(fresh)  # read from the recomputed shard


def test_a_shard_touched_but_unchanged_is_served_after_a_second_check(tmp_path, monkeypatch):
    digests = text_digests(TEXTS)
    features = np.random.default_rng(0).normal(size=(len(TEXTS), 3, 3, 4)).astype(np.float32)
    FeatureStore(tmp_path).write(digests, features)
    hashed = []
    digest = shards.file_digest
    monkeypatch.setattr(shards, "file_digest", lambda p: hashed.append(p.name) or digest(p))
    store = FeatureStore(tmp_path)
    np.testing.assert_array_equal(store.read(digests)[0], features)
    np.testing.assert_array_equal(store.read(digests)[0], features)
    assert len(hashed) == 2  # once per file
    os.utime(values_file(tmp_path))  # a new mtime, the same bytes
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureCacheWarning)
        np.testing.assert_array_equal(store.read(digests)[0], features)
    assert len(hashed) == 4  # verified again, and served


def test_a_shard_changed_between_the_check_and_the_read_is_not_served(tmp_path):
    digests = text_digests(TEXTS)
    features = np.random.default_rng(1).normal(size=(len(TEXTS), 3, 3, 4)).astype(np.float32)
    FeatureStore(tmp_path).write(digests, features)
    values = values_file(tmp_path)
    _, shard = shards.verify(values.parent, values.name[: -len(".vals.npy")])  # what a read checks
    rows = np.arange(len(TEXTS))
    np.testing.assert_array_equal(shard.read(rows), features)
    os.truncate(values_file(tmp_path), values_file(tmp_path).stat().st_size // 2)
    assert shard.changed() and shard.read(rows) is None
    # a read that comes up short (the file ended early) says so rather than serving zeros
    with open(values_file(tmp_path), "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        assert not shards.read_spans(handle, np.array([0]), size + 1, np.empty(size + 1, "u1"))


def test_a_cache_folder_deleted_while_the_process_runs_is_made_again(tiny_bert, uncached, tmp_path):
    """A user clears the cache (from a notebook) while the process runs: the next transforms,
    of the same estimator or a fresh one, encode the texts again into a new folder."""
    est = BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path).fit(TEXTS)
    np.testing.assert_array_equal(est.transform(TEXTS), uncached)
    shutil.rmtree(tmp_path / "skbert-features")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureCacheWarning)
        np.testing.assert_array_equal(est.transform(TEXTS), uncached)
        assert len(list(tmp_path.rglob("*.keys.npy"))) == 1
        shutil.rmtree(tmp_path / "skbert-features")
        fresh = BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path).fit(TEXTS)
        np.testing.assert_array_equal(fresh.transform(TEXTS), uncached)
    assert len(list(tmp_path.rglob("*.keys.npy"))) == 1
    assert len(list(tmp_path.rglob("key.json"))) == 1


def test_a_bytes_path_is_refused_before_anything_is_written(tiny_bert, tmp_path):
    """os.fspath passes bytes through: an export traced the whole model, then failed mixing
    str and bytes, and left an empty folder."""
    from skbert._storage.files import check_output_dir

    target = os.fsencode(tmp_path / "out")
    with pytest.raises(TypeError, match=r"path must be a folder path .* got bytes b'.*os.fsdecode"):
        check_output_dir(target, "path")
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:1])
    for write in (est.save, est.save_pretrained):
        with pytest.raises(TypeError, match="got bytes"):
            write(target)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_path_is_refused_before_any_work(tiny_bert, tmp_path, monkeypatch):
    """further_pretrain(texts, '') trained, then failed in os.makedirs(''); checkpoint_dir=''
    failed after the model loaded, naming no parameter; memory='' wrote the feature cache
    into the working directory."""
    from skbert import BertTextClassifier
    from skbert.pretraining import further_pretrain

    monkeypatch.chdir(tmp_path)
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:1])
    for write in (est.save, est.save_pretrained):
        with pytest.raises(ValueError, match="path='' is not a folder path"):
            write("")
    with pytest.raises(ValueError, match="output_dir='' is not a folder path"):
        further_pretrain(TEXTS, "", model=str(tmp_path / "no-model"))
    with pytest.raises(ValueError, match="checkpoint_dir='' is not a folder path"):
        BertTextClassifier(str(tmp_path / "no-model"), checkpoint_dir="").fit(TEXTS[:2], [0, 1])
    with pytest.raises(ValueError, match="memory='' is not a folder path"):
        BertSentenceTransformer(tiny_bert, device="cpu", memory="").fit(TEXTS[:1])
    assert list(tmp_path.iterdir()) == []


def test_paths_a_user_writes_as_they_read_them(tiny_bert, tmp_path, monkeypatch):
    """save_pretrained('~/hf') wrote ./~/hf, which model='~/hf' (expanded) did not find; a
    valid name of 84 CJK characters (252 bytes) got a temporary sibling over 255 bytes; a
    .DS_Store in a save's tokenizer folder made it unloadable; data_home='' read the
    working directory; a save on another drive than the working directory (Windows) failed
    in os.path.commonpath."""
    import skbert
    from skbert._estimator.persistence import folder
    from skbert.datasets import get_data_home

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:2])
    assert est.save_pretrained("~/hf") == str(tmp_path / "home" / "hf")
    assert not (tmp_path / "~").exists()
    np.testing.assert_allclose(
        BertSentenceTransformer("~/hf", device="cpu").fit(TEXTS[:2]).transform(TEXTS),
        est.transform(TEXTS),
        rtol=1e-6,
    )
    name = "模" * 84  # 252 bytes
    est.save(name)
    est.save(name)  # replaced: its previous save kept aside under a valid name meanwhile
    (tmp_path / name / "tokenizer_" / ".DS_Store").write_bytes(b"\0")
    np.testing.assert_array_equal(skbert.load(name).transform(TEXTS), est.transform(TEXTS))
    with pytest.raises(TypeError, match="data_home='' is not a folder path"):
        get_data_home("")

    def two_drives(paths):
        raise ValueError("Paths don't have the same drive")

    monkeypatch.setattr(folder.os.path, "commonpath", two_drives)
    assert est.save(tmp_path / "elsewhere") == str(tmp_path / "elsewhere")


def test_the_truncation_helpers_refuse_a_bool_for_a_count():
    from skbert.truncation import split_chunks, truncate

    with pytest.raises(TypeError, match="budget=True is not allowed"):
        truncate([1, 2, 3], True, "head")
    with pytest.raises(TypeError, match="max_chunks=True: give ints"):
        split_chunks([1, 2, 3, 4, 5], 2, max_chunks=True)


def test_a_folder_path_is_checked_up_the_way_the_system_resolves_it(tmp_path, monkeypatch):
    """A path under a file is refused before any work; '..' is resolved after symbolic links,
    as os.makedirs resolves it (the check normalised the path first: link/../afile/y, which
    makedirs creates under the link's target, was refused as lying under ./afile)."""
    from skbert._storage.files import check_output_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    with pytest.raises(NotADirectoryError, match="lies under .*afile'?, an existing file"):
        check_output_dir("afile/sub/out", "path")
    with pytest.raises(NotADirectoryError, match="lies under"):
        check_output_dir("afile/../out", "path")  # makedirs fails there too
    assert check_output_dir("link/../afile/y", "path") == "link/../afile/y"
    os.makedirs("link/../afile/y")  # under real/, as the check said
    assert (tmp_path / "real" / "afile" / "y").is_dir()
    assert check_output_dir("new/deep/folder", "path") == "new/deep/folder"
