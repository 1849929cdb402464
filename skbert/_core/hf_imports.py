"""One lock for skbert's calls into transformers that may import its modules.

transformers imports its modules lazily, on the first use of a name (``from transformers
import AutoModel``) or of a model type (``AutoModel.from_pretrained`` of a BERT checkpoint
imports ``modeling_bert``), and two threads doing so at once can fail: in a fresh process, two
fits started together in threads (``GridSearchCV`` under joblib's threading backend, a Dask
worker with two threads) had one of them fail with ``ImportError: cannot import name
'AutoModel' from 'transformers'``, five times in five. skbert's loading of tokenizers, models
and configurations, and its building of models from a configuration, run under
:func:`transformers_lock`, one thread at a time (the save and restore of transformers' logging
settings around them too); predictions of a loaded model do not take it.

Lock order: a thread that needs torch's generators too (:func:`skbert._core.rng.rng_lock`)
takes them first, never while it holds this lock.
"""

from __future__ import annotations

from .locks import ForkSafeLock

__all__ = ["transformers_lock"]

_turns = ForkSafeLock()


def transformers_lock():
    """Context: run the block as the only one of the process's threads inside this context
    (a thread may enter it again inside it)."""
    return _turns.held()
