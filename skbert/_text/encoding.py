"""Texts -> model rows: tokenize, truncate (or chunk), add special tokens, pad, block by length.

The estimators encode texts into rows here (:func:`encode_texts`), the training loop pads them
into batches (:func:`pad_batch`), prediction blocks them by length (:func:`row_blocks`); masked-LM
pre-training cuts its windows (:func:`text_windows`) and pads them (:func:`pad_features`) with the
same code.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import gc
import os
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from ..truncation import split_chunks, truncate, truncate_pair

__all__ = [
    "Encoded",
    "distinct_rows",
    "encode_texts",
    "pad_batch",
    "pad_features",
    "pad_rows",
    "plain_backend",
    "refuse_chunked_pairs",
    "row_blocks",
    "stack_rows",
    "text_windows",
    "token_ids",
    "tokenizing_threads",
]


@dataclass
class Encoded:
    """Model-ready rows for a list of texts.

    ``rows[i]`` is the list of ``(input_ids, token_type_ids)`` rows of text ``i``: one row,
    or one per chunk with ``truncation="chunks"``. ``n_truncated`` counts the texts longer
    than one row holds; ``n_cut`` those that lost tokens (all of them, except with
    ``truncation="chunks"``, where only texts past ``max_chunks`` windows lose any).
    """

    rows: list
    n_truncated: int
    n_cut: int = 0

    def __len__(self) -> int:
        return len(self.rows)

    def subset(self, indices) -> Encoded:
        """The rows of the texts ``indices`` (``n_truncated`` is not carried over)."""
        return Encoded([self.rows[i] for i in indices], 0)


def token_ids(tokenizer, texts, block=4096):
    """Token ids of ``texts``, without special tokens.

    A fast tokenizer's Rust backend is called directly (``encode_batch_fast``: the ids without
    the character offsets, which skbert does not use); the ids are the same as
    ``tokenizer(texts)`` gives. Tokenized in blocks: a tokenizer's full output is far larger
    than the ids, and holding it for all texts at once would make memory grow with their
    number. The Rust tokenizer spreads a block over the cores itself, unless its parallelism is
    off (``TOKENIZERS_PARALLELISM`` false, which the tokenizers library also sets in a process
    forked after it ran in parallel): then blocks are tokenized in as many threads as torch
    has (the backend releases the GIL; 67,349 SST-2 sentences on 2 cores: 1.6 s in one
    thread, 0.9-1.1 s in two).
    """
    backend = plain_backend(tokenizer)
    parts = [texts[start : start + block] for start in range(0, len(texts), block)]
    if backend is None:
        return [
            ids
            for part in parts
            for ids in tokenizer(
                part,
                add_special_tokens=False,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,
            )["input_ids"]
        ]

    def ids_of(part):
        return [e.ids for e in backend.encode_batch_fast(part, add_special_tokens=False)]

    threads = min(len(parts), tokenizing_threads())
    if threads <= 1:
        return [ids for part in parts for ids in ids_of(part)]
    with concurrent.futures.ThreadPoolExecutor(threads, "skbert-tokenize") as pool:
        return [ids for result in pool.map(ids_of, parts) for ids in result]


#: Values of ``TOKENIZERS_PARALLELISM`` that turn the Rust tokenizer's parallelism off (as the
#: tokenizers library reads it).
_PARALLELISM_OFF = frozenset({"", "off", "false", "f", "no", "n", "0"})


def tokenizing_threads() -> int:
    """Threads for tokenizing blocks: 1 when the Rust tokenizer parallelizes itself (the
    default), else torch's thread count (the cores prediction uses)."""
    setting = os.environ.get("TOKENIZERS_PARALLELISM")
    if setting is None or setting.strip().lower() not in _PARALLELISM_OFF:
        return 1
    return max(1, torch.get_num_threads())


def plain_backend(tokenizer):
    """A copy of the Rust tokenizer behind a fast ``tokenizer``, with no truncation or padding:
    what ``tokenizer(texts, add_special_tokens=False)`` runs. None for a slow tokenizer.

    A copy, made once per tokenizer, because a checkpoint's ``tokenizer.json`` may set a
    truncation on the backend itself (the tokenizer's own calls turn it off each time).
    """
    if not getattr(tokenizer, "is_fast", False):
        return None
    try:
        return _PLAIN_BACKENDS[tokenizer]
    except (KeyError, TypeError):
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        return None
    plain = copy.deepcopy(backend)
    plain.no_truncation()
    plain.no_padding()
    if hasattr(plain, "encode_special_tokens"):
        # the copy reads "[SEP]" in a text as the separator; a tokenizer whose configuration
        # sets split_special_tokens reads it as text (transformers sets the flag on each call)
        plain.encode_special_tokens = bool(getattr(tokenizer, "split_special_tokens", False))
    with contextlib.suppress(TypeError):  # not weak-referenceable: copy again next time
        _PLAIN_BACKENDS[tokenizer] = plain
    return plain


_PLAIN_BACKENDS = weakref.WeakKeyDictionary()


def encode_texts(tokenizer, specials, first, second=None, *, readout) -> Encoded:
    """Tokenize texts (or pairs) and cut them to ``readout.max_length`` tokens, specials
    included.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        The model's tokenizer.
    specials : SpecialTokens
        Where it puts its special tokens.
    first : list of str
        Texts, or the first sentences of pairs.
    second : list of str or None
        Second sentences of pairs.
    readout : Readout
        Its ``truncation``, ``max_length``, ``head_length`` and ``max_chunks`` apply.

    Returns
    -------
    Encoded

    Raises
    ------
    ValueError
        For sentence pairs with ``truncation="chunks"``.
    """
    if second is not None:
        refuse_chunked_pairs(second, readout.chunked)
    with _collection_paused():
        return _encode(tokenizer, specials, first, second, readout)


def refuse_chunked_pairs(second, chunked: bool) -> None:
    """Raise for sentence pairs (``second`` not None) read with ``truncation="chunks"``."""
    if second is not None and chunked:
        raise ValueError(
            "truncation='chunks' splits single long texts and does not apply to sentence "
            "pairs; use 'head', 'tail' or 'head+tail' for pairs."
        )


@contextlib.contextmanager
def _collection_paused():
    """Python's cyclic garbage collector paused (and its state restored after).

    Encoding makes a few small lists per text and no reference cycles, yet each batch of new
    containers sets off a collection that walks every object alive: 0.7 of 2.4 s when encoding
    67,349 short texts. Nothing here needs the collector; reference counting frees the lists.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _encode(tokenizer, specials, first, second, readout) -> Encoded:
    """Encode each distinct text (or pair) once; copies share its rows (the same objects, so
    that :func:`distinct_rows` sees them as one)."""
    keys = first if second is None else list(zip(first, second, strict=True))
    index = {}
    where = [index.setdefault(key, len(index)) for key in keys]
    if len(index) == len(keys):
        rows, truncated, cut = _encode_each(tokenizer, specials, first, second, readout)
        return Encoded(rows, sum(truncated), sum(cut))
    distinct = list(index)
    if second is None:
        rows, truncated, cut = _encode_each(tokenizer, specials, distinct, None, readout)
    else:
        pairs = ([a for a, _ in distinct], [b for _, b in distinct])
        rows, truncated, cut = _encode_each(tokenizer, specials, *pairs, readout)
    return Encoded(
        [rows[j] for j in where], sum(truncated[j] for j in where), sum(cut[j] for j in where)
    )


def _encode_each(tokenizer, specials, first, second, readout):
    """Rows of every text (or pair), whether each was longer than ``max_length``, and whether
    each lost tokens."""
    max_length, strategy = readout.max_length, readout.truncation
    ids_first = token_ids(tokenizer, first)
    rows, truncated = [], []
    if second is None:
        budget = max_length - specials.n_single
        if readout.chunked:  # texts lose tokens only past max_chunks windows
            most = None if readout.max_chunks is None else budget * readout.max_chunks
            cut = [most is not None and len(ids) > most for ids in ids_first]
        for ids in ids_first:
            truncated.append(len(ids) > budget)
            if readout.chunked:
                windows = split_chunks(ids, budget, readout.max_chunks)
                rows.append([specials.build(window) for window in windows])
            else:
                kept = truncate(ids, budget, strategy, readout.head_length)
                rows.append([specials.build(kept)])
        return rows, truncated, cut if readout.chunked else truncated
    budget = max_length - specials.n_pair
    if budget < 2:  # not one token of each sentence: rows would outgrow max_length
        raise ValueError(
            f"max_length={max_length} leaves no room for sentence pairs: this tokenizer adds "
            f"{specials.n_pair} special tokens to a pair; use max_length >= "
            f"{specials.n_pair + 2} (one token of each sentence) for pairs."
        )
    ids_second = token_ids(tokenizer, second)
    for a, b in zip(ids_first, ids_second, strict=True):
        truncated.append(len(a) + len(b) > budget)
        rows.append([specials.build(*truncate_pair(a, b, budget, strategy, readout.head_length))])
    return rows, truncated, truncated


def text_windows(ids, budget: int, specials, words=None) -> list:
    """All of one text's tokens as model windows, each with the model's special tokens.

    The windows are those of ``truncation="chunks"`` without ``max_chunks``: consecutive cuts
    of ``budget`` content tokens (:func:`~skbert.truncation.split_chunks`), each wrapped in the
    special tokens by ``specials.build``; so every token is read once, in order. A text without
    tokens has no window.

    Parameters
    ----------
    ids : sequence of int
        The text's token ids, without special tokens.
    budget : int
        Content tokens per window (``max_length`` less the special tokens).
    specials : SpecialTokens
        Where the tokenizer puts its special tokens.
    words : sequence of int or None, default=None
        The word of each of ``ids`` (numbers >= 0, in the text's order), cut into the same
        windows.

    Returns
    -------
    list of dict
        Features per window, as a tokenizer returns them: ``input_ids``, ``attention_mask``,
        ``special_tokens_mask`` (1 on the special tokens) and, with ``words``, ``word_ids``
        (-1 for the special tokens).
    """
    if not len(ids):
        return []
    prefix, suffix = (len(part) for part in specials.single)
    word_chunks = None if words is None else split_chunks(words, budget)
    windows = []
    for i, content in enumerate(split_chunks(ids, budget)):
        input_ids, _ = specials.build(content)
        window = {
            "input_ids": input_ids,
            "attention_mask": [1] * len(input_ids),
            "special_tokens_mask": [1] * prefix + [0] * len(content) + [1] * suffix,
        }
        if word_chunks is not None:
            window["word_ids"] = [-1] * prefix + list(word_chunks[i]) + [-1] * suffix
        windows.append(window)
    return windows


def pad_rows(rows, width: int, fill=0, *, left: bool = False) -> np.ndarray:
    """Rows of per-token values padded with ``fill`` to ``width`` tokens.

    Parameters
    ----------
    rows : list of sequence
        Per-token values of each row (ints, or tuples of ints such as character offsets), at
        most ``width`` each.
    width : int
        Tokens per padded row.
    fill : int or tuple of int, default=0
        Value of the padding positions (a tuple for rows of tuples).
    left : bool, default=False
        Pad on the left (the rows end at the last column) instead of the right.

    Returns
    -------
    ndarray of int64, of shape (len(rows), width) or (len(rows), width, len(fill))
    """
    padded = np.full((len(rows), width, *np.shape(fill)), fill, dtype=np.int64)
    for r, values in enumerate(rows):
        n = len(values)
        if n and left:
            padded[r, width - n :] = values
        elif n:
            padded[r, :n] = values
    return padded


#: What :func:`pad_features` pads each feature with (``input_ids``: the pad token's id): the
#: padding is masked out, counts as a special token (never chosen for masking), is in no
#: word, and has no masked-LM target.
PADDING = {
    "attention_mask": 0,
    "token_type_ids": 0,
    "special_tokens_mask": 1,
    "word_ids": -1,
    "labels": -100,
}


def pad_features(rows, pad_id: int, *, left: bool = False) -> dict:
    """Pad feature rows (such as :func:`text_windows`') to the longest into arrays.

    Parameters
    ----------
    rows : list of dict
        Each row's features, the same keys in every row (see :data:`PADDING`).
    pad_id : int
        Id of the pad token (the fill of ``input_ids``).
    left : bool, default=False
        Pad on the left (a tokenizer's ``padding_side="left"``).

    Returns
    -------
    dict of ndarray
        ``{key: int64 array of shape (n_rows, longest)}``.
    """
    width = max(len(row["input_ids"]) for row in rows)
    fill = {**PADDING, "input_ids": pad_id}
    return {
        key: pad_rows([row[key] for row in rows], width, fill[key], left=left) for key in rows[0]
    }


def pad_batch(encoded: Encoded, indices, pad_id: int):
    """Pad the rows of the texts ``indices`` into numpy arrays (for training batches).

    Returns
    -------
    input_ids, attention_mask, token_type_ids : ndarray of shape (n_rows, longest)
    owner : ndarray of shape (n_rows,)
        Position in ``indices`` of the text each row belongs to.
    """
    rows = [row for i in indices for row in encoded.rows[i]]
    owner = np.fromiter(
        (pos for pos, i in enumerate(indices) for _ in encoded.rows[i]), dtype=np.int64
    )
    width = max(len(ids) for ids, _ in rows)
    input_ids = pad_rows([ids for ids, _ in rows], width, pad_id)
    token_types = pad_rows([types for _, types in rows], width)
    lengths = np.fromiter((len(ids) for ids, _ in rows), dtype=np.int64, count=len(rows))
    mask = (np.arange(width) < lengths[:, None]).astype(np.int64)
    return input_ids, mask, token_types, owner


def row_blocks(lengths, block_tokens: int):
    """Prediction blocks: rows of one length, a fixed number of them per length.

    A block holds ``max(1, block_tokens // length)`` rows of ``length`` tokens: no padding, so
    no attention mask, and a shape that depends on the length alone. The last block of a length
    is filled up with repeats of its rows, so every row is computed in a forward pass of the same
    shape whichever other texts come with it, which makes its output the same bit for bit (the
    math library picks its kernels by shape). The longest rows come first, so that an
    out-of-memory error shows at once.

    Parameters
    ----------
    lengths : array-like of int
        Tokens per row.
    block_tokens : int
        Token positions per block (rows of more tokens go one per block).

    Yields
    ------
    positions : ndarray of int
        Row positions of the block, repeats included (always the block's full size).
    n_real : int
        How many of ``positions`` are new: the first ``n_real``; the rest are repeats.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    for length in np.unique(lengths)[::-1]:
        rows = np.flatnonzero(lengths == length)
        per_block = max(1, block_tokens // int(length))
        for start in range(0, len(rows), per_block):
            real = rows[start : start + per_block]
            yield np.resize(real, per_block), len(real)


def distinct_rows(rows):
    """The distinct rows of ``rows`` (first occurrences, in order), and where each row is.

    Prediction computes a row met several times once: :func:`encode_texts` encodes a text
    met several times once, and its copies share its row objects, which are told apart here
    by identity (no hashing of token ids). Every row's output depends on the row alone (see
    :func:`row_blocks`), so the copies get the same bits as if each were computed.

    Parameters
    ----------
    rows : list of (input_ids, token_type_ids)
        Model rows.

    Returns
    -------
    distinct : list of (input_ids, token_type_ids)
        Each distinct row once.
    where : ndarray of int64
        ``rows[i]`` is ``distinct[where[i]]``.
    """
    index = {}
    where = np.fromiter(
        (index.setdefault(id(row), len(index)) for row in rows), dtype=np.int64, count=len(rows)
    )
    if len(index) == len(rows):
        return rows, where
    first = np.full(len(index), -1, dtype=np.int64)
    first[where[::-1]] = np.arange(len(rows))[::-1]  # the first position of each
    return [rows[i] for i in first], where


def stack_rows(rows):
    """``(input_ids, token_type_ids)`` arrays of rows of one length (see :func:`row_blocks`)."""
    input_ids = np.array([ids for ids, _ in rows], dtype=np.int64)
    token_types = np.array([types for _, types in rows], dtype=np.int64)
    return input_ids, token_types
