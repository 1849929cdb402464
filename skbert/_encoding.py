"""Texts -> model rows: tokenize, truncate (or chunk), add special tokens, batch by length."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .truncation import split_chunks, truncate, truncate_pair

__all__ = [
    "TOKENS_PER_TEXT",
    "Encoded",
    "encode_texts",
    "pad_batch",
    "row_batches",
    "stack_rows",
]


@dataclass
class Encoded:
    """Model-ready rows for a list of texts.

    ``rows[i]`` is the list of ``(input_ids, token_type_ids)`` rows of text ``i``: one row,
    or one per chunk with ``truncation="chunks"``.
    """

    rows: list
    n_truncated: int

    def __len__(self) -> int:
        return len(self.rows)

    def subset(self, indices) -> Encoded:
        """The rows of the texts ``indices`` (``n_truncated`` is not carried over)."""
        return Encoded([self.rows[i] for i in indices], 0)


def _tokenize(tokenizer, texts, block=1024):
    """Token ids of ``texts``, without special tokens.

    Tokenized in blocks: a fast tokenizer's full output (offsets, token strings) is far larger
    than the ids, and holding it for all texts at once would make memory grow with their number.
    """
    ids = []
    for start in range(0, len(texts), block):
        ids.extend(
            tokenizer(
                texts[start : start + block],
                add_special_tokens=False,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,
            )["input_ids"]
        )
    return ids


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
    max_length, strategy = readout.max_length, readout.truncation
    if second is not None and readout.chunked:
        raise ValueError(
            "truncation='chunks' splits single long texts and does not apply to sentence "
            "pairs; use 'head', 'tail' or 'head+tail' for pairs."
        )
    ids_first = _tokenize(tokenizer, first)
    rows, n_truncated = [], 0
    if second is None:
        budget = max_length - specials.n_single
        for ids in ids_first:
            if len(ids) > budget:
                n_truncated += 1
            if readout.chunked:
                windows = split_chunks(ids, budget, readout.max_chunks)
                rows.append([specials.build(window) for window in windows])
            else:
                kept = truncate(ids, budget, strategy, readout.head_length)
                rows.append([specials.build(kept)])
        return Encoded(rows, n_truncated)
    ids_second = _tokenize(tokenizer, second)
    budget = max_length - specials.n_pair
    for a, b in zip(ids_first, ids_second, strict=True):
        if len(a) + len(b) > budget:
            n_truncated += 1
        rows.append([specials.build(*truncate_pair(a, b, budget, strategy, readout.head_length))])
    return Encoded(rows, n_truncated)


#: An inference batch holds up to ``batch_size * TOKENS_PER_TEXT`` token positions: in prediction
#: ``batch_size`` is a token budget (texts of 32 tokens), in training a number of texts.
TOKENS_PER_TEXT = 32


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
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    token_types = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for r, (ids, types) in enumerate(rows):
        input_ids[r, : len(ids)] = ids
        token_types[r, : len(types)] = types
        mask[r, : len(ids)] = 1
    return input_ids, mask, token_types, owner


def row_batches(lengths, batch_size: int):
    """Inference batches of rows that all have the same number of tokens: no padding at all.

    Without padding a row's output does not depend on the rows it shares a batch with (bit for
    bit for all-MiniLM-L6-v2 on the CPU at batch sizes 1 to 64; other shapes may round the last
    bit differently, as the math library decides), so a text gets the same vector whatever else
    is encoded with it, and the forward pass needs no attention mask. A batch holds up to
    ``batch_size * TOKENS_PER_TEXT`` token positions (at least one row); the longest rows come
    first, so that an out-of-memory error shows at once.

    Parameters
    ----------
    lengths : array-like of int
        Tokens per row.
    batch_size : int

    Yields
    ------
    ndarray of int
        Row positions of one batch.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    budget = batch_size * TOKENS_PER_TEXT
    for length in np.unique(lengths)[::-1]:
        rows = np.flatnonzero(lengths == length)
        per_batch = max(1, budget // int(length))
        for start in range(0, len(rows), per_batch):
            yield rows[start : start + per_batch]


def stack_rows(rows):
    """``(input_ids, token_type_ids)`` arrays of rows of one length (see :func:`row_batches`)."""
    input_ids = np.array([ids for ids, _ in rows], dtype=np.int64)
    token_types = np.array([types for _, types in rows], dtype=np.int64)
    return input_ids, token_types
