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
import warnings

import torch

from .._core.messages import user_stacklevel
from .._nn.backbone import checkpoint_normalizes, load_backbone
from .._nn.network import exported_backbone_state

__all__ = ["fitted_encoder_source", "load_encoder", "model_normalizes", "resolve_normalize"]


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
    checkpoint it was fitted from (a ``BertSentenceTransformer(normalize="auto")``: what that
    checkpoint said when it was fitted, its ``normalize_``, the checkpoint being needed no
    more). Warns and answers False where the checkpoint can be found nowhere."""
    fitted = fitted_encoder_source(model)
    if fitted is not None:
        if getattr(fitted, "normalize", None) == "auto" and hasattr(fitted, "normalize_"):
            return bool(fitted.normalize_)
        return model_normalizes(fitted.model)
    found = checkpoint_normalizes(model)
    if found is None:
        warnings.warn(
            f"normalize='auto' cannot tell whether model={model!r} normalises its vectors: "
            "the checkpoint is not found (moved or deleted since it was loaded?), so the "
            "vectors are left unnormalised. Set normalize=True or False to choose.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    return bool(found)


def resolve_normalize(estimator, continuing: bool) -> bool:
    """``normalize_`` of a :class:`~skbert.BertSentenceTransformer` fit: its ``normalize``,
    or for ``"auto"`` :func:`model_normalizes` of its ``model`` (a ``warm_start`` fit that
    continues the fitted network keeps the answer of the fit it continues)."""
    if estimator.normalize != "auto":
        return bool(estimator.normalize)
    if continuing and "normalize_" in vars(estimator):
        return bool(estimator.normalize_)
    return model_normalizes(estimator.model)
