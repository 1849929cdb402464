"""Which training objective a :class:`~skbert.BertSentenceTransformer` fit runs.

SBERT's objectives follow the data: sentence pairs with similarity scores train ``"cosine"``,
pairs with class labels ``"pair-softmax"`` (the NLI objective), single texts with class labels
``"softmax"``; ``"contrastive"`` (SetFit-style) is asked for, never inferred.
:func:`resolve_objective` reads ``objective="auto"`` from the data and checks that an objective
asked for fits it, naming what is wrong; :func:`cosine_targets` and :func:`class_targets` turn
``y`` into the loss's targets by what the first fit learned (a warm start keeps it).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.utils.multiclass import type_of_target

from .._core.messages import user_stacklevel
from .targets import holds_scores

__all__ = [
    "class_targets",
    "cosine_targets",
    "refuse_untrainable_top",
    "resolve_objective",
    "warn_untrained_objective",
]

_START_ANEW = "or fit with warm_start=False to start anew."


def refuse_untrainable_top(fine_tune: str, pooling: str, objective: str, encoder) -> None:
    """Refuse ``fine_tune="top"`` when ``encoder`` has no trainable weight past its backbone:
    "top" trains what the vectors pass through (a CNN pooling, chunk attention), and an output
    layer alone (the softmax objectives') would train and leave the vectors as they were, and
    so would chunk attention where texts are not cut into chunks (``truncation`` other than
    ``"chunks"``: it reads no windows) or into one (``max_chunks=1``: its weight is 1)."""
    windows = encoder.readout.chunked and encoder.readout.max_chunks != 1  # one window: weight 1
    unused = ("backbone.",) if windows else ("backbone.", "chunk_pooling.")
    if any(not name.startswith(unused) for name, _ in encoder.named_parameters()):
        return
    raise ValueError(
        f"fine_tune={fine_tune!r} trains the weights on top of the encoder that the vectors "
        f"pass through, and with pooling={pooling!r} there are none (objective={objective!r}"
        "'s output layer is not part of the vectors). Use fine_tune='full', or pooling='cnn' "
        "or 'pooler' (or chunk_pooling='attention' with truncation='chunks')."
    )


def cosine_targets(y: np.ndarray, score_range: tuple) -> torch.Tensor:
    """Gold scores as the cosine's targets, ``(y - low) / (high - low)`` in [0, 1].

    ``score_range`` is the first fit's ``(low, high)``, which a warm start keeps: a score
    outside it would ask for a cosine above 1 (or below 0), which the model cannot give, so
    it is refused rather than trained towards.
    """
    low, high = score_range
    if y.min() < low or y.max() > high:
        raise ValueError(
            f"warm_start=True keeps the score range ({low:g}, {high:g}) of the first fit (the "
            f"targets are (y - {low:g}) / {high - low:g}, which a cosine reaches only within "
            f"it), and y has scores from {y.min():g} to {y.max():g}: scale y to that range, "
            + _START_ANEW
        )
    return torch.as_tensor((y - low) / max(high - low, 1e-12), dtype=torch.float32)


def class_targets(y: np.ndarray, classes: np.ndarray) -> torch.Tensor:
    """Indices of ``y``'s labels in ``classes`` (the first fit's, which a warm start keeps)."""
    unseen = np.setdiff1d(np.unique(y), classes)
    if len(unseen):
        raise ValueError(
            f"warm_start=True but y has labels the model was not fitted with: "
            f"{unseen[:5].tolist()}{' ...' if len(unseen) > 5 else ''} (classes_ is "
            f"{classes[:10].tolist()}{' ...' if len(classes) > 10 else ''}); " + _START_ANEW
        )
    return torch.as_tensor(np.searchsorted(classes, y), dtype=torch.int64)


def resolve_objective(objective: str, fine_tune: str, second, y) -> str:
    """The objective a fit runs on ``(X, y)``: ``objective``, ``"auto"`` read from the data.

    Parameters
    ----------
    objective : {"auto", "cosine", "pair-softmax", "softmax", "contrastive"}
        The estimator's ``objective``.
    fine_tune : str
        The estimator's ``fine_tune`` (for the message when ``y`` is missing).
    second : sequence of str or None
        The second texts of sentence pairs, or None for single texts.
    y : array-like or None
        Scores or class labels (a 0/1 indicator for ``"contrastive"``).

    Returns
    -------
    str
        The resolved objective.

    Raises
    ------
    ValueError
        If ``y`` is None, or the objective does not fit the data (pairs or single texts,
        scores or class labels).
    """
    if y is None:
        raise ValueError(
            f"fine_tune={fine_tune!r} trains on labelled data: pass y (similarity "
            "scores for sentence pairs, or class labels), or use fine_tune='none'."
        )
    # float y on pairs = similarity scores (even when whole numbers); ints / strings = classes
    continuous = holds_scores(
        y, "BertSentenceTransformer", allow_multilabel=objective == "contrastive"
    )
    if objective == "auto":
        if second is None:
            objective = "softmax"
        else:
            objective = "cosine" if continuous else "pair-softmax"
    if objective in ("cosine", "pair-softmax") and second is None:
        raise ValueError(f"objective={objective!r} needs sentence pairs (2-column X).")
    if objective in ("softmax", "contrastive") and second is not None:
        raise ValueError(f"objective={objective!r} takes single texts; X has 2 columns.")
    # whole-number floats are class labels to a class objective (as to LogisticRegression);
    # float y as float64, an object array of numbers too (holds_scores read it as floats)
    scores = np.asarray(y, dtype=np.float64) if continuous and objective != "cosine" else None
    if (
        scores is not None
        and scores.ndim == 1  # a 2-D float y is a multi-label indicator (check_class_labels)
        and np.isfinite(scores).all()  # a NaN or inf: check_class_labels names its position
        and type_of_target(scores) == "continuous"
    ):
        raise ValueError(
            f"objective={objective!r} needs class labels, but y holds continuous values; "
            "similarity scores train objective='cosine' on sentence pairs."
        )
    return objective


def warn_untrained_objective(objective: str, fine_tune: str, wise_alpha=1.0) -> None:
    """Warn that ``objective`` (or ``wise_alpha``) is set but ``fine_tune="none"`` trains
    nothing.

    A fit with ``fine_tune="none"`` loads the encoder as it is: ``objective`` (and every other
    training parameter) has no effect, which ``BertSentenceTransformer(objective=
    "contrastive")`` alone would leave unsaid. Like scikit-learn's warning for an unused
    ``l1_ratio``, this warns rather than fails, so that a grid may search ``fine_tune``.
    """
    if objective != "auto":
        warnings.warn(
            f"objective={objective!r} is ignored with fine_tune={fine_tune!r}, which loads the "
            "encoder without training it; set fine_tune='full' (or 'top') to train it.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    warn_unblended(wise_alpha, fine_tune)


def warn_unblended(wise_alpha, fine_tune: str) -> None:
    """Warn that ``wise_alpha`` is set but the encoder does not train (``fine_tune="none"`` or
    ``"top"``): there is nothing to blend, so it has no effect."""
    if wise_alpha != 1:
        warnings.warn(
            f"wise_alpha={wise_alpha!r} is ignored with fine_tune={fine_tune!r}, which does not "
            "train the encoder: there are no trained weights to blend with the pre-trained "
            "ones; it acts with fine_tune='full'.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
