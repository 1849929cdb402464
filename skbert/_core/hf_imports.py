"""One lock for skbert's calls into transformers that may import its modules.

transformers imports its modules lazily, on the first use of a name (``from transformers
import AutoModel``) or of a model type (``AutoModel.from_pretrained`` of a BERT checkpoint
imports ``modeling_bert``), and two threads doing so at once can fail: in a fresh process, two
fits started together in threads (``GridSearchCV`` under joblib's threading backend, a Dask
worker with two threads) had one of them fail with ``ImportError: cannot import name
'AutoModel' from 'transformers'``, five times in five. skbert's loading of tokenizers, models
and configurations, and its building of models from a configuration, run under
:func:`transformers_lock`, one thread at a time (the save and restore of transformers' logging
settings around them too); prediction does not take it.

Lock order: a thread that needs torch's generators too (:func:`skbert._core.rng.rng_lock`)
takes them first, never while it holds this lock.
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["transformers_lock"]

_lock = threading.RLock()


@contextlib.contextmanager
def transformers_lock():
    """Run the block as the only one of the process's threads inside this context (a
    thread may enter it again inside it)."""
    with _lock:
        yield


def _after_fork_in_child() -> None:
    # a thread of the parent that held the lock does not exist in the child
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
