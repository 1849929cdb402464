"""The frozen-feature cache used by several threads of one process at once.

``get_store`` hands one store per key folder to every thread: a Dask worker with
``nthreads=k`` runs ``k`` frozen ``memory=`` transforms at once.
"""

import sys
import threading

import numpy as np
import pytest
from conftest import TEXTS

from skbert import BertSentenceTransformer
from skbert._storage.feature_cache import clear_memo, get_store, text_digests

N_THREADS = 4


@pytest.fixture
def often_switching():
    """Threads switched every microsecond, so that unguarded changes of shared state meet."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def run_threads(work):
    """Run ``work(i)`` in ``N_THREADS`` threads at once; the exceptions they raised."""
    errors = []
    start = threading.Barrier(N_THREADS)

    def target(i):
        try:
            start.wait()
            work(i)
        except Exception as error:  # noqa: BLE001 - every failure is reported
            errors.append(error)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(N_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def rows(thread, step, n=3):
    """Texts a thread writes at one step, and their stored rows: their own values."""
    texts = [f"thread {thread} step {step} text {k}" for k in range(n)]
    values = np.arange(n * 4, dtype=np.float32).reshape(n, 4) + 1000 * thread + step
    return texts, values


def test_one_store_read_and_written_by_threads(tmp_path, often_switching):
    """Each thread writes shards and reads its own and the others' rows through the one
    store: no thread fails (the index was changed while another iterated it), and every
    read gives what a single thread reads."""
    clear_memo()
    store = get_store(tmp_path, {"k": "threads"})
    store.expect((4,))
    n_steps = 40

    def work(i):
        for step in range(n_steps):
            texts, values = rows(i, step)
            digests = text_digests(texts)
            store.read(digests)
            with store.encoding():
                store.write(digests, values)
            found, missing = store.read(digests)
            assert len(missing) == 0
            np.testing.assert_array_equal(found, values)
            other = text_digests(rows((i + 1) % N_THREADS, step)[0])
            store.read(other)  # rows another thread may be writing

    errors = run_threads(work)
    assert not errors, f"{len(errors)} threads failed, first: {errors[0]!r}"
    everything = [rows(i, step) for i in range(N_THREADS) for step in range(n_steps)]
    digests = text_digests([t for texts, _ in everything for t in texts])
    expected = np.concatenate([values for _, values in everything])
    for reader in (store, get_store(tmp_path, {"k": "threads"})):
        assert reader is store  # one store per key folder
        found, missing = reader.read(digests)
        assert len(missing) == 0
        np.testing.assert_array_equal(found, expected)
    clear_memo()
    found, missing = get_store(tmp_path, {"k": "threads"}).read(digests)  # from disk alone
    assert len(missing) == 0
    np.testing.assert_array_equal(found, expected)


def test_threads_transforming_with_one_memory_give_single_threaded_vectors(
    tiny_bert, tmp_path, often_switching
):
    """Frozen fits with one ``memory`` transform in threads at once, over texts that
    overlap: each gets the vectors it gets alone, without the cache."""
    texts = [f"{a} {b}" for a in TEXTS for b in ("sat", "ran", "was good")]
    poolings = ["mean", "cls", "max", "mean"]

    def chosen(i):
        return texts[i::2]  # threads 0 and 2, 1 and 3 share every text

    def make(i, **params):
        return BertSentenceTransformer(tiny_bert, device="cpu", pooling=poolings[i], **params)

    expected = [make(i).fit(TEXTS).transform(chosen(i)) for i in range(N_THREADS)]
    got = [None] * N_THREADS

    def work(i):
        est = make(i, memory=tmp_path).fit(TEXTS)
        got[i] = [est.transform(chosen(i)) for _ in range(2)]  # encoded, then read

    errors = run_threads(work)
    assert not errors, f"{len(errors)} threads failed, first: {errors[0]!r}"
    for i in range(N_THREADS):
        for vectors in got[i]:
            np.testing.assert_allclose(vectors, expected[i], rtol=0, atol=1e-6)
