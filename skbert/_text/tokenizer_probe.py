"""Whether a tokenizer read back from its files is the tokenizer that was written.

A save (:mod:`skbert._estimator.persistence.codec`) writes the tokenizer with
``save_pretrained`` and stores :func:`tokenizer_probe` of it: its class, padding id, length
limit and the ids of :data:`PROBE_TEXTS`, alone and as pairs. Writing and loading both read the
folder back with :func:`read_tokenizer` and refuse a tokenizer whose probe differs (another
transformers or tokenizers version may encode differently).
"""

from __future__ import annotations

import os
from pathlib import Path

from .._core.hf_imports import transformers_lock

__all__ = ["PROBE_TEXTS", "is_tokenizer", "read_tokenizer", "tokenizer_probe"]

#: texts whose encodings tell whether a reloaded tokenizer is the same tokenizer
PROBE_TEXTS = (
    "",
    "the cat sat on the mat.",
    "Hello, World! It's 3:45pm -- isn't it?",
    "  Leading, trailing\tand\ninner   whitespace  ",
    "Ünïcödé ß café 東京 Привет 🙂",
    "unbelievably antidisestablishmentarianism [MASK] <mask> [UNK]",
)


def is_tokenizer(value) -> bool:
    """Whether ``value`` is a transformers tokenizer."""
    with transformers_lock():
        from transformers import PreTrainedTokenizerBase

    return isinstance(value, PreTrainedTokenizerBase)


def read_tokenizer(folder: Path):
    """The tokenizer saved in ``folder``, with ``AutoTokenizer`` (``trust_remote_code=False``).

    transformers' loading messages are not silenced here: callers wrap the call in
    :func:`skbert._nn.backbone.quiet_loading`.
    """
    with transformers_lock():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(os.fspath(folder), trust_remote_code=False)


def tokenizer_probe(tokenizer) -> dict:
    """What a reloaded tokenizer must reproduce: its class, padding id, length limit and the
    ids of probe texts, alone and as pairs (plain JSON)."""
    singles = [tokenizer(text)["input_ids"] for text in PROBE_TEXTS]
    texts = PROBE_TEXTS
    pairs = [tokenizer(a, b)["input_ids"] for a, b in zip(texts[:-1], texts[1:], strict=True)]
    limit = tokenizer.model_max_length
    return {
        "class": type(tokenizer).__name__,
        "pad_token_id": tokenizer.pad_token_id,
        "model_max_length": limit if type(limit) is int else repr(limit),
        "singles": [list(map(int, ids)) for ids in singles],
        "pairs": [list(map(int, ids)) for ids in pairs],
    }
