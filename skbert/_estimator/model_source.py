"""The ``model`` parameter resolved: a checkpoint, or a fitted skbert estimator to start from.

``model`` names a checkpoint (a hub id or a local folder, loaded by
:mod:`skbert._nn.backbone`) or is a fitted skbert estimator (or one wrapped in
``sklearn.frozen.FrozenEstimator``) whose fine-tuned encoder another estimator starts from:
Sun et al.'s multi-task recipe. This module turns the second kind into what the lower layers
take, a tokenizer and a copy of the encoder, reading the estimator through its public seam
:meth:`~skbert._estimator.base.BertEstimatorBase.fitted_network`, so that the torch modules'
layer knows nothing of estimators. Used by the estimator base (``fit``), by
``BertSentenceTransformer`` and by :func:`skbert.pretraining.load_masked_lm`.
"""

from __future__ import annotations

import copy
import os

import torch

from .._nn.backbone import checkpoint_normalizes, load_backbone
from .._nn.network import exported_backbone_state

__all__ = ["fitted_encoder_source", "load_encoder", "model_normalizes"]


def fitted_encoder_source(model):
    """The fitted skbert estimator that ``model`` stands for, or None if ``model`` is a str.

    ``model`` may be a fitted skbert estimator or one wrapped in
    ``sklearn.frozen.FrozenEstimator`` (which survives ``clone``, so it works inside
    ``GridSearchCV``).

    Raises
    ------
    ValueError
        When ``model`` is an estimator that is not fitted (as a clone of a fitted one is).
    """
    if isinstance(model, (str, os.PathLike)):
        return None
    inner = getattr(model, "estimator", model)  # FrozenEstimator(fitted)
    if isinstance(inner, type):  # the class itself has the methods that a fitted one has
        raise ValueError(
            f"model={inner.__name__} is a class; pass a fitted {inner.__name__} instance (its "
            "fine-tuned encoder is the starting point), a hub id or a model folder."
        )
    # a fitted skbert estimator has tokenizer_ (its network_ may wait to be loaded: memory=)
    if not hasattr(inner, "fitted_network") or not hasattr(inner, "tokenizer_"):
        raise ValueError(
            f"model={type(inner).__name__}(...) is not fitted. A fitted skbert estimator can "
            "be the starting point of another (its encoder, not its head); scikit-learn's "
            "clone (GridSearchCV, cross_validate) unfits estimators given as parameters, so "
            "there pass sklearn.frozen.FrozenEstimator(fitted), or fitted.save_pretrained(path) "
            "and model=path."
        )
    return inner


def load_encoder(model):
    """``(tokenizer, encoder)`` for ``model``: :func:`~skbert._nn.backbone.load_backbone` of a
    checkpoint, or copies of a fitted estimator's tokenizer and fine-tuned encoder (as its
    ``save_pretrained`` writes it: the trained pooler of ``pooling="pooler"`` as the pooler).

    The encoder is in float32, in eval mode, on the CPU.

    Raises
    ------
    OSError
        When a checkpoint can be found nowhere, saying how to get it.
    ValueError
        When ``model`` is an estimator that is not fitted.
    """
    fitted = fitted_encoder_source(model)
    if fitted is None:
        return load_backbone(model)
    network = fitted.fitted_network()
    backbone = copy.deepcopy(network.backbone)
    state = exported_backbone_state(network)  # pooling="pooler": its trained copy is the pooler
    if state is not None:
        backbone.load_state_dict(state)
    return copy.deepcopy(fitted.tokenizer_), backbone.to("cpu", torch.float32).eval()


def model_normalizes(model) -> bool:
    """Whether ``model``'s checkpoint L2-normalises its sentence embeddings
    (:func:`~skbert._nn.backbone.checkpoint_normalizes`); a fitted estimator stands for the
    checkpoint it was fitted from."""
    fitted = fitted_encoder_source(model)
    if fitted is not None:
        return model_normalizes(fitted.model)
    return checkpoint_normalizes(model)
