"""Fits in threads of one process: each follows its random_state, none fails on
transformers' lazy imports, and transformers' logging settings come back as they were.

torch has one random generator per process and transformers imports its modules on first use;
``GridSearchCV`` under joblib's threading backend (or a Dask worker with two threads) runs
fits in threads of one process, where two fits drew each other's dropout masks and, in a fresh
process, one of two fits started together failed with ``ImportError: cannot import name
'AutoModel' from 'transformers'``."""

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from transformers.utils import logging as hf_logging

from skbert import BertSentenceTransformer, BertTextClassifier

X = ["good film", "great plot", "awful film", "bad plot", "fine cast", "dull cast"] * 4
Y = [1, 1, 0, 0, 1, 0] * 4


def _fit(model, pooling, start=None):
    if start is not None:
        start.wait()  # both fits begin together
    clf = BertTextClassifier(
        model, pooling=pooling, max_epochs=3, batch_size=4, dropout=0.3, random_state=0
    )
    return clf.fit(X, Y).predict_proba(X)


def test_fits_in_threads_each_follow_their_random_state(tiny_bert):
    alone = [_fit(tiny_bert, pooling) for pooling in ("mean", "cls")]
    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    torch.manual_seed(123)
    start = threading.Barrier(2)
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda p: _fit(tiny_bert, p, start), ("mean", "cls")))
    for a, t in zip(alone, together, strict=True):
        np.testing.assert_array_equal(a, t)
    # and the caller's generator is where it was
    assert torch.equal(torch.rand(3), expected_draw)


def test_fits_in_threads_put_back_transformers_logging(tiny_bert):
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_info()
    try:
        for _ in range(3):
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda _: BertSentenceTransformer(tiny_bert).fit(X), range(8)))
            assert hf_logging.get_verbosity() == hf_logging.INFO
    finally:
        hf_logging.set_verbosity(before)


def test_first_fits_of_a_fresh_process_in_threads_import_transformers_once(tiny_bert):
    # a fresh interpreter: transformers not imported yet when the two fits start together
    code = textwrap.dedent(
        f"""
        import threading
        from concurrent.futures import ThreadPoolExecutor
        from skbert import BertTextClassifier
        import sys
        assert "transformers" not in sys.modules
        start = threading.Barrier(2)
        def fit(pooling):
            start.wait()
            try:
                BertTextClassifier({tiny_bert!r}, pooling=pooling, max_epochs=1).fit(
                    ["good", "bad", "fine", "dull"], [1, 0, 1, 0]
                )
                return "ok"
            except Exception as exc:
                return f"{{type(exc).__name__}}: {{exc}}"
        with ThreadPoolExecutor(2) as pool:
            print(list(pool.map(fit, ("mean", "cls"))))
        """
    )
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == "['ok', 'ok']", done.stdout + done.stderr[-2000:]


def test_a_child_forked_while_another_thread_holds_the_locks_can_take_them():
    import multiprocessing

    from skbert._core.hf_imports import transformers_lock
    from skbert._core.rng import rng_lock

    held, release = threading.Event(), threading.Event()

    def hold():
        with rng_lock(), transformers_lock():
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(60)
    try:
        child = multiprocessing.get_context("fork").Process(target=_take_both_locks)
        child.start()
        child.join(20)
        stuck = child.is_alive()
        if stuck:
            child.kill()
            child.join()
    finally:
        release.set()
        holder.join()
    assert not stuck, "the forked child waited for a lock held by a thread it does not have"
    assert child.exitcode == 0


def _take_both_locks():
    from skbert._core.hf_imports import transformers_lock
    from skbert._core.rng import rng_lock

    with rng_lock(), transformers_lock():
        pass
