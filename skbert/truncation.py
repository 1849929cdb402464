"""Truncation strategies of Sun et al. (2019) as pure functions on token-id lists.

The ids given here never include special tokens: ``budget`` is the number of content tokens
that fit once the model's special tokens ([CLS], [SEP], ...) are reserved, so special tokens
are always kept.

- ``"head"``: the first ``budget`` tokens.
- ``"tail"``: the last ``budget`` tokens.
- ``"head+tail"``: the first ``head_length`` tokens and the last ``budget - head_length``
  (Sun et al. keep 128 + 382 of 510).
- ``"chunks"``: the whole text cut into consecutive windows of ``budget`` tokens (the
  hierarchical method); each window is encoded on its own and the windows are pooled later.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["STRATEGIES", "truncate", "split_chunks", "truncate_pair"]

#: The values of the estimators' ``truncation``; :func:`truncate` does the first three,
#: :func:`split_chunks` ``"chunks"``.
STRATEGIES = ("head", "tail", "head+tail", "chunks")
_SINGLE_WINDOW = STRATEGIES[:3]


def truncate(ids: Sequence[int], budget: int, strategy: str, head_length: int = 128) -> list:
    """Cut one token-id sequence down to ``budget`` tokens.

    Parameters
    ----------
    ids : sequence of int
        Token ids without special tokens.
    budget : int
        Number of content tokens allowed (>= 0).
    strategy : {"head", "tail", "head+tail"}
        Which part of the text to keep.
    head_length : int, default=128
        Head tokens kept by ``"head+tail"`` (>= 0); clipped to ``budget``.

    Returns
    -------
    list of int
        ``ids`` itself (as a list) when it fits, else the kept tokens in their original order.

    Raises
    ------
    ValueError
        For another ``strategy``, or a negative ``budget`` or ``head_length``.
    TypeError
        For a bool ``budget`` or ``head_length``.
    """
    _check(budget, strategy, head_length)
    ids = list(ids)
    if len(ids) <= budget:
        return ids
    if strategy == "head":
        return ids[:budget]
    if strategy == "tail":
        return ids[len(ids) - budget :]
    head = min(head_length, budget)  # "head+tail"
    tail = budget - head
    return ids[:head] + (ids[len(ids) - tail :] if tail else [])


def _check(budget, strategy, head_length) -> None:
    """Raise for a strategy other than the single-window ones, or a bool or negative
    ``budget`` or ``head_length``."""
    if (
        strategy in _SINGLE_WINDOW
        and budget >= 0
        and head_length >= 0
        and not isinstance(budget, bool)
        and not isinstance(head_length, bool)
    ):
        return
    for name, value in (("budget", budget), ("head_length", head_length)):
        if isinstance(value, bool):  # True would count as 1 token
            raise TypeError(f"{name}={value!r} is not allowed; give a number of tokens (an int).")
    if strategy not in _SINGLE_WINDOW:
        raise ValueError(
            f"strategy={strategy!r} is not a single-window truncation; "
            "allowed: 'head', 'tail', 'head+tail'."
        )
    if budget < 0:
        raise ValueError(f"budget={budget!r} is negative; it counts the tokens kept (>= 0).")
    raise ValueError(
        f"head_length={head_length!r} is negative; it counts the head tokens kept (>= 0)."
    )


def split_chunks(ids: Sequence[int], budget: int, max_chunks: int | None = None) -> list:
    """Cut a token-id sequence into consecutive windows of at most ``budget`` tokens.

    Parameters
    ----------
    ids : sequence of int
        Token ids without special tokens (or any per-token values, such as the tokens'
        character offsets, to cut into the same windows as the ids).
    budget : int
        Content tokens per window (>= 1).
    max_chunks : int or None, default=None
        Keep at most this many windows (the first ones); None keeps all.

    Returns
    -------
    list of list of int
        At least one window; an empty text gives one empty window.
    """
    if isinstance(budget, bool) or isinstance(max_chunks, bool):  # True would count as 1
        raise TypeError(
            f"budget={budget!r} and max_chunks={max_chunks!r}: give ints (a bool is not)."
        )
    if budget < 1 or (max_chunks is not None and max_chunks < 1):
        raise ValueError(
            f"budget={budget!r} and max_chunks={max_chunks!r}: a window holds at least one "
            "token (budget >= 1) and a text keeps at least one window (max_chunks >= 1 or "
            "None)."
        )
    ids = list(ids)
    chunks = [ids[start : start + budget] for start in range(0, len(ids), budget)] or [[]]
    if max_chunks is not None:
        chunks = chunks[:max_chunks]
    return chunks


def truncate_pair(
    first: Sequence[int],
    second: Sequence[int],
    budget: int,
    strategy: str,
    head_length: int = 128,
) -> tuple:
    """Cut a sentence pair down to ``budget`` tokens in all, longest side first.

    The shorter side is kept whole when it takes at most half the budget; otherwise both sides
    get half, an odd budget's last token going to the longer side (to the second on a tie), as
    the fast (Rust) tokenizers' ``truncation="longest_first"`` splits it (skbert loads those).
    Each side is then cut to its share with ``strategy``; ``"head+tail"`` keeps the same
    proportion of head tokens in each side as in the whole budget: ``head_length * share //
    budget`` of its beginning, the rest from its end (with ``head_length=128`` and a budget of
    253, a side of 127 keeps 64 + 63).

    Parameters
    ----------
    first : sequence of int
        Token ids of the first text, without special tokens.
    second : sequence of int
        Token ids of the second text, without special tokens.
    budget : int
        Number of content tokens allowed for the two texts together.
    strategy : {"head", "tail", "head+tail"}
        Which part of each text to keep.
    head_length : int, default=128
        Head tokens of the whole budget for ``"head+tail"``; each side keeps its proportion.

    Returns
    -------
    tuple of (list of int, list of int)
        The kept tokens of ``first`` and of ``second``, each in its original order.

    Raises
    ------
    ValueError
        For another ``strategy``, or a negative ``budget`` or ``head_length`` (whether or not
        the pair fits).
    TypeError
        For a bool ``budget`` or ``head_length``.
    """
    _check(budget, strategy, head_length)
    first, second = list(first), list(second)
    if len(first) + len(second) <= budget:
        return first, second
    half = budget // 2
    if len(first) <= half:
        keep_first, keep_second = len(first), budget - len(first)
    elif len(second) <= half:
        keep_first, keep_second = budget - len(second), len(second)
    elif len(first) > len(second):
        keep_first, keep_second = budget - half, half
    else:
        keep_first, keep_second = half, budget - half
    return (
        truncate(first, keep_first, strategy, head_length * keep_first // max(budget, 1)),
        truncate(second, keep_second, strategy, head_length * keep_second // max(budget, 1)),
    )
