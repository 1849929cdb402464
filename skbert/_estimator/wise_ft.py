"""``wise_alpha`` of :class:`~skbert.BertSentenceTransformer`: WiSE-FT after a fit.

The parameter's numpydoc entry, and the two points of a fit where it acts: before training,
:func:`starting_weights` copies the weights to average back (the pre-trained encoder's, only
when the encoder trains and ``wise_alpha < 1``); after it, :func:`average_back` blends them
into the trained encoder (:mod:`skbert._training.weight_averaging` does the arithmetic).
"""

from __future__ import annotations

from .._nn.backbone import UNTRAINED_POOLER
from .._training.weight_averaging import StartingWeights
from ..pooling import PoolerPooling
from .objectives import warn_unblended
from .parameter_docs import numpydoc_entries

__all__ = ["WISE_PARAMETERS", "average_back", "starting_weights"]

#: the numpydoc entry of ``wise_alpha``
WISE_PARAMETERS = numpydoc_entries(
    """
wise_alpha : float in [0, 1], default=1.0
    Weight-space ensembling (WiSE-FT, Wortsman et al. 2022) after a ``fine_tune="full"``
    fit: each weight of the pre-trained encoder (with ``pooling="pooler"``, its pooler's
    too) becomes ``(1 - wise_alpha) * before + wise_alpha * trained``, keeping part of what
    pre-training taught, which training on a few texts can wear away. 1 keeps the trained
    weights; 0 restores the pre-trained ones. Layers new to the fit (a CNN pooling, chunk
    attention, an output layer, a pooler the checkpoint has no weights for) keep their
    trained weights. Whether it helps depends on the task (user guide, held-out data,
    ``objective="contrastive"`` at 0.5: +0.6 to +1.0 points on SST-2 with 8 or 16
    labelled texts per class, -5 to -8 on TREC with 8), so search it rather than set it
    blind. With ``warm_start``, ``before`` is the fitted encoder the fit continues. It is
    applied after training: refitting the same data with another value from a finished
    ``checkpoint_dir`` does not train again.
"""
)


def starting_weights(estimator, encoder, train_backbone: bool) -> StartingWeights | None:
    """A copy of ``encoder``'s pre-trained weights to average back after training, or None
    when nothing is averaged (``wise_alpha=1``, or the encoder does not train)."""
    if estimator.wise_alpha < 1 and train_backbone:
        return StartingWeights(encoder, prefix=_pre_trained(encoder))
    if not train_backbone:
        warn_unblended(estimator.wise_alpha, estimator.fine_tune)
    return None


def _pre_trained(encoder) -> tuple:
    """The names' beginnings of ``encoder``'s weights that existed before the fit: the
    backbone's, and ``pooling="pooler"``'s dense layer, a copy of the checkpoint's pooler
    (unless the checkpoint had no pooler weights: then it starts random, as a new layer)."""
    pooler = isinstance(encoder.pooling, PoolerPooling)
    if pooler and not getattr(encoder.backbone, UNTRAINED_POOLER, False):
        return ("backbone.", "pooling.dense.")
    return ("backbone.",)


def average_back(estimator, start: StartingWeights | None, encoder) -> None:
    """Blend :func:`starting_weights`' copy into the trained ``encoder`` (in place)."""
    if start is not None:
        start.blend_into(encoder, float(estimator.wise_alpha))
