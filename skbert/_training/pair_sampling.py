"""Streamed training batches of contrastive fine-tuning: label pairs and class-balanced texts.

SetFit (Tunstall et al. 2022) fine-tunes a sentence encoder on pairs of labelled texts: a
positive pair shares a label, a negative pair does not. It builds every pair up front, which
holds ``2 * num_iterations * n_texts`` pairs in memory at once. Here no epoch's pairs are ever
held together: :class:`LazyBatches` is a sequence of batches that makes batch ``i`` when it is
asked for, from a seed of its own (the epoch's seed and ``i``), so a batch is the same whatever
was asked before (a resumed checkpoint gets the same batches) and memory is one batch, plus
the label index (one array of the texts' positions, sorted by label), whatever the number of
texts.

Two kinds of batch:

* :class:`PairSampler`: rows ``(anchor, partner, target)``, target 1 for a positive pair, 0
  for a negative. In an epoch each text anchors ``pairs_per_text`` positive pairs and as many
  negative ones (SetFit's ``num_iterations``), in rounds: each round visits every text once, in
  a fresh random order, and gives it one positive and one negative partner.
* :class:`BalancedTextSampler`: indices of texts, balanced by label: a batch takes a few
  labels (in turn, from a shuffled cycle, so every label comes up) and several texts of each,
  so that an in-batch loss sees positives and negatives of every text.

Labels are one per text (class labels) or several (a 0/1 indicator matrix, multi-label): two
texts are a positive pair when they share at least one label, a negative pair when they share
none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["LabelIndex", "LazyBatches", "PairSampler", "BalancedTextSampler"]


#: the streams of an epoch's seed: a batch's draws, and the orders of the rounds or cycles
_BATCH, _ORDER = 0, 1


def _rng(seed: int, stream: int, index: int) -> np.random.Generator:
    """The random generator of item ``index`` of ``stream`` in the epoch seeded by ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([seed, stream, index]))


class LazyBatches(Sequence):
    """Batches ``make(seed, i)`` for ``i`` in ``range(n)``, made only when asked for.

    A slice is another :class:`LazyBatches` over the same batches (nothing is made), so the
    training loop can cut and resume an epoch without the epoch's batches ever being held.

    Parameters
    ----------
    make : callable ``(seed, index) -> ndarray``
        Makes one batch; must depend on its arguments only.
    n_batches : int
        Batches in the epoch.
    seed : int
        The epoch's seed.
    """

    def __init__(self, make, n_batches: int, seed: int, _indices: range | None = None):
        self._make, self._seed = make, seed
        self._indices = range(n_batches) if _indices is None else _indices

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return LazyBatches(self._make, 0, self._seed, self._indices[item])
        return self._make(self._seed, self._indices[item])


class LabelIndex:
    """Which texts hold which label, stored once (``O(n_texts * labels per text)``).

    Parameters
    ----------
    labels : ndarray of shape (n_texts,) of int, or (n_texts, n_labels) of 0/1
        Class codes ``0 .. n_classes - 1``, or a multi-label indicator matrix.
    """

    def __init__(self, labels):
        labels = np.asarray(labels)
        self.multilabel = labels.ndim == 2
        if self.multilabel:
            self.indicator = labels.astype(bool)
            rows, label_of = np.nonzero(self.indicator.T)  # grouped by label
            self.members = label_of.astype(np.int64)
            counts = np.bincount(rows, minlength=labels.shape[1])
        else:
            self.codes = labels.astype(np.int64)
            self.members = np.argsort(self.codes, kind="stable")
            counts = np.bincount(self.codes)
        self.n_texts = len(labels)
        self.counts = counts
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.present = np.flatnonzero(counts)  # the labels held by some text

    def texts_with(self, label: int) -> np.ndarray:
        """Positions of the texts holding ``label`` (a view)."""
        start = self.starts[label]
        return self.members[start : start + self.counts[label]]

    def share(self, anchors: np.ndarray) -> np.ndarray:
        """``(len(anchors), n_texts)``: True where a text shares a label with the anchor."""
        if self.multilabel:
            held = self.indicator[anchors].astype(np.float32)
            return held @ self.indicator.T.astype(np.float32) > 0
        return self.codes[anchors][:, None] == self.codes[None, :]


def _texts_with_partners(index: LabelIndex) -> tuple:
    """``(texts with a positive partner, texts with a negative partner)``.

    Raises
    ------
    ValueError
        If no two texts share a label, or every two do: no pair of that kind to train on.
    """
    if not index.multilabel:
        shares = index.counts[index.codes]  # texts of its class, itself included
    else:
        shares = np.empty(index.n_texts, dtype=np.int64)
        for start in range(0, index.n_texts, 256):  # bounded memory: 256 rows at a time
            rows = np.arange(start, min(start + 256, index.n_texts))
            shares[rows] = index.share(rows).sum(axis=1)
    has_positive = np.flatnonzero(shares > 1)  # itself and at least one more
    has_negative = np.flatnonzero(shares < index.n_texts)
    if not len(has_positive):
        raise ValueError(
            "no two texts share a label, so there is no positive pair to train on: "
            "the contrastive objective needs at least 2 texts of some class."
        )
    if not len(has_negative):
        raise ValueError(
            "every text shares a label with every other, so there is no negative pair "
            "to train on: the contrastive objective needs texts of 2 classes or more."
        )
    return has_positive, has_negative


class PairSampler:
    """Balanced positive and negative pairs of labelled texts, drawn afresh each epoch.

    Parameters
    ----------
    labels : ndarray
        As in :class:`LabelIndex`.
    pairs_per_text : int
        Positive pairs each text anchors per epoch, and as many negative ones.
    batch_size : int
        Pairs per batch.

    Notes
    -----
    A positive partner is a uniform draw among the other texts that share a label with the
    anchor, a negative partner among the texts that share none. A text without a positive
    partner (the only text of its class, or a multi-label text without a label) still anchors
    its negative pairs and is a partner in others' pairs; its positive pairs go to a text drawn
    among those that have one, so the epoch stays balanced. Likewise for a text that shares a
    label with every other (no negative partner). Single-label draws cost ``O(1)`` per pair;
    multi-label ones ``O(n_texts)`` per pair (a comparison with every text's labels).
    """

    def __init__(self, labels, pairs_per_text: int, batch_size: int):
        self.index = LabelIndex(labels)
        self.pairs_per_text = pairs_per_text
        self.batch_size = batch_size
        n = self.index.n_texts
        self.has_positive, self.has_negative = _texts_with_partners(self.index)
        # whether each text has them, looked up per anchor (np.isin sorted all the texts
        # at every batch: O(n_texts) a batch, an epoch quadratic in the texts)
        self._can_pair = np.zeros((2, n), dtype=bool)
        self._can_pair[0, self.has_positive] = True
        self._can_pair[1, self.has_negative] = True
        self.n_pairs = 2 * pairs_per_text * n
        self._order_key, self._order = None, None
        if not self.index.multilabel:  # each text's position among its class's members
            self._rank = np.empty(n, dtype=np.int64)
            self._rank[self.index.members] = np.arange(n) - np.repeat(
                self.index.starts, self.index.counts
            )

    def epoch(self, rng: np.random.RandomState) -> LazyBatches:
        """This epoch's batches: one seed drawn from ``rng``, the batches made when read."""
        seed = int(rng.randint(2**31 - 1))
        return LazyBatches(self.batch, math.ceil(self.n_pairs / self.batch_size), seed)

    def batch(self, seed: int, index: int) -> np.ndarray:
        """Batch ``index`` of the epoch ``seed``: ``(rows, 3)`` int64 rows of
        ``(anchor, partner, target)``."""
        n = self.index.n_texts
        first = index * self.batch_size
        slots = np.arange(first, min(first + self.batch_size, self.n_pairs))
        rounds, within = np.divmod(slots, 2 * n)
        anchors = np.empty(len(slots), dtype=np.int64)
        for r in np.unique(rounds):  # a batch spans at most two rounds
            anchors[rounds == r] = self._round_order(seed, int(r))[within[rounds == r] // 2]
        positive = within % 2 == 0  # each text's positive, then its negative
        rng = _rng(seed, _BATCH, index)
        anchors = self._stand_ins(anchors, positive, rng)
        partners = self._partners(anchors, positive, rng)
        return np.stack([anchors, partners, positive.astype(np.int64)], axis=1)

    def _round_order(self, seed: int, round_: int) -> np.ndarray:
        """The order in which round ``round_`` visits the texts (the last one kept: a round
        spans many batches)."""
        if self._order_key != (seed, round_):
            self._order = _rng(seed, _ORDER, round_).permutation(self.index.n_texts)
            self._order_key = (seed, round_)
        return self._order

    def _stand_ins(self, anchors, positive, rng) -> np.ndarray:
        """Anchors, with a text that has such a partner in place of one that has none."""
        has_pos, has_neg = self._can_pair[:, anchors]
        lacking_pos, lacking_neg = positive & ~has_pos, ~positive & ~has_neg
        anchors = anchors.copy()
        anchors[lacking_pos] = rng.choice(self.has_positive, int(lacking_pos.sum()))
        anchors[lacking_neg] = rng.choice(self.has_negative, int(lacking_neg.sum()))
        return anchors

    def _partners(self, anchors, positive, rng) -> np.ndarray:
        index = self.index
        if index.multilabel:
            candidates = index.share(anchors)
            candidates[~positive] = ~candidates[~positive]
            candidates[np.arange(len(anchors)), anchors] = False  # never a text with itself
            # a uniform draw among each row's candidates: the largest of uniform keys
            keys = np.where(candidates, rng.random(candidates.shape), -1.0)
            return keys.argmax(axis=1).astype(np.int64)
        codes = index.codes[anchors]
        start, count = index.starts[codes], index.counts[codes]
        u = rng.random(len(anchors))
        partners = np.empty(len(anchors), dtype=np.int64)
        # positive: the other texts of the class (its members but the anchor itself)
        pick = np.minimum((u * (count - 1)).astype(np.int64), count - 2)
        pick = pick + (pick >= self._rank[anchors])  # skip the anchor itself
        partners[positive] = index.members[(start + pick)[positive]]
        # negative: the texts outside the class, before and after its run of members
        outside = index.n_texts - count
        pick = np.minimum((u * outside).astype(np.int64), outside - 1)
        pick = np.where(pick >= start, pick + count, pick)
        partners[~positive] = index.members[pick[~positive]]
        return partners


class BalancedTextSampler:
    """Batches of texts balanced by label, for a loss over every pair in the batch.

    Parameters
    ----------
    labels : ndarray
        As in :class:`LabelIndex`.
    passes : int
        An epoch has ``ceil(passes * n_texts / batch_size)`` batches: each text is in about
        ``passes`` of them when the batches are full, in fewer when they are not (a label
        with fewer texts than its share of a batch: 16 texts of 2 labels in batches of 32
        make batches of 16, each text in about ``passes / 2``).
    batch_size : int
        Texts per batch (at most); 4 or more, so that a batch holds a positive pair.
    min_per_label : int, default=4
        A batch takes ``batch_size // min_per_label`` labels (all of them when there are
        fewer) and ``batch_size // labels taken`` texts of each (fewer when a label has
        fewer texts), so that each text meets several positives in its batch.

    Raises
    ------
    ValueError
        If ``batch_size`` is under 4, or no two texts share a label, or every two do.

    Notes
    -----
    The labels of a batch are the next ones of a cycle through every label present, shuffled
    afresh each time round, so every label is in some batch of each epoch that has at least
    ``n_labels / (batch_size // per_label)`` batches. A text of several labels can be drawn
    for two of them; it is then in the batch once. Multi-label texts without a label take a
    turn in the cycle as one more group: in a batch they are negatives of every other text.
    """

    def __init__(self, labels, passes: int, batch_size: int, min_per_label: int = 4):
        if batch_size < 4:
            raise ValueError(
                f"batch_size={batch_size}: a loss over the pairs of a batch needs batches "
                "of 4 texts or more (2 labels, 2 texts of each) to hold a positive pair; use "
                "batch_size >= 4, or the pair loss contrastive_loss='cosine'."
            )
        self.index = LabelIndex(labels)
        _texts_with_partners(self.index)  # the same errors as PairSampler's
        # the groups a batch draws from: each label's texts, then those of no label
        self.groups = [self.index.texts_with(label) for label in self.index.present]
        if self.index.multilabel:
            unlabelled = np.flatnonzero(~self.index.indicator.any(axis=1))
            if len(unlabelled):
                self.groups.append(unlabelled)
        n_groups = len(self.groups)
        self.labels_per_batch = min(n_groups, max(2, batch_size // min_per_label))
        self.per_label = max(1, batch_size // self.labels_per_batch)
        self.n_batches = self.batches_per_epoch(self.index.n_texts, passes, batch_size)

    @staticmethod
    def batches_per_epoch(n_texts: int, passes: int, batch_size: int) -> int:
        """``ceil(passes * n_texts / batch_size)``: the batches of an epoch."""
        return math.ceil(passes * n_texts / batch_size)

    def epoch(self, rng: np.random.RandomState) -> LazyBatches:
        """This epoch's batches: one seed drawn from ``rng``, the batches made when read."""
        return LazyBatches(self.batch, self.n_batches, int(rng.randint(2**31 - 1)))

    def batch(self, seed: int, index: int) -> np.ndarray:
        """Batch ``index`` of the epoch ``seed``: int64 positions of texts."""
        k, n = self.labels_per_batch, len(self.groups)
        # the next k groups of the cycles; where the end of one cycle meets a group again at
        # the start of the next, the groups after it fill the batch (k <= n of them differ)
        first = index * k
        stream = [
            _rng(seed, _ORDER, turn).permutation(n)
            for turn in range(first // n, (first + 2 * k) // n + 1)
        ]
        stream = np.concatenate(stream)[first - (first // n) * n :]
        groups = list(dict.fromkeys(stream.tolist()))[:k]
        rng = _rng(seed, _BATCH, index)
        picks = []
        for group in groups:
            members = self.groups[group]
            size = min(self.per_label, len(members))
            picks.append(rng.choice(members, size, replace=False))
        texts = np.concatenate(picks)
        _, first_seen = np.unique(texts, return_index=True)
        return texts[np.sort(first_seen)].astype(np.int64)
