"""Layer-wise learning-rate decay (Sun et al. 2019) as a pure function over named parameters.

Layer ``k`` of ``L`` gets ``learning_rate * layer_lr_decay ** (L - k)``; the embeddings count
as layer 0 and so get the lowest rate; weights that skbert adds on top of the encoder (pooling,
output layer) get ``top_learning_rate``. One-dimensional parameters (biases, LayerNorm) get no
weight decay.

How a parameter's depth is found:

- BERT-style encoders (BERT, RoBERTa, ELECTRA, DeBERTa, DistilBERT, MiniLM, ...): the index in
  ``...layer.<i>.`` (or ``layers.<i>``, ``block.<i>``, ``h.<i>``) is layer ``i + 1``; names with
  ``embed`` are layer 0; anything else in the encoder (a pooler, and the relative-position
  tables that every layer reads: DeBERTa's ``rel_embeddings`` and their norm, MPNet's
  ``relative_attention_bias``) counts as the top layer.
- ALBERT shares one set of layer weights among all ``L`` layers (per group, with
  ``num_hidden_groups`` > 1). A shared weight cannot have a per-layer rate: skbert gives each
  group the rate of the top layer it serves (with one group, ``learning_rate``), and the
  embeddings (and their projection ``embedding_hidden_mapping_in``) ``learning_rate * xi**L``.
  So for ALBERT, decay slows the embeddings only (and lower groups, if there are several).
- Any other encoder whose layers are not numbered in its parameter names: a ``UserWarning``
  says that the decay applies to the embeddings only.
"""

from __future__ import annotations

import math
import re
import warnings
from numbers import Real

import numpy as np
import torch

from ._core.deprecations import NOT_GIVEN, read_top_learning_rate, warn_head_learning_rate
from ._core.messages import user_stacklevel

__all__ = ["layerwise_param_groups", "parameter_depths"]

_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|layers|block|blocks|h)\.(\d+)\.")
_ALBERT_GROUP = re.compile(r"albert_layer_groups\.(\d+)\.")


def _depths(backbone) -> tuple:
    """``(depths, numbered)``: :func:`parameter_depths`'s map, and whether any parameter
    name has a layer number."""
    config = backbone.config
    n_layers = int(config.num_hidden_layers)
    n_groups = int(getattr(config, "num_hidden_groups", 1) or 1)
    # ALBERT's layer i (from 0) runs group int(i / (L / G)): a group's depth is its top layer's
    group_top = {int(i / (n_layers / n_groups)): i + 1 for i in range(n_layers)}
    depths, numbered = {}, False
    for name, _ in backbone.named_parameters():
        group = _ALBERT_GROUP.search(name)
        layer = _LAYER_INDEX.search(name)
        # a numbered layer's own tables first: BERT's relative_key distance_embedding (in
        # transformers 4) is layer i's, not the embeddings'
        if group is not None:
            numbered = True
            depths[name] = group_top.get(int(group.group(1)), n_layers)
        elif layer is not None:
            numbered = True
            depths[name] = min(int(layer.group(1)) + 1, n_layers)
        elif "embed" in name and "rel_embeddings" not in name:
            depths[name] = 0
        else:
            depths[name] = n_layers
    return depths, numbered


def parameter_depths(backbone) -> dict:
    """Map each parameter name of ``backbone`` to its depth: 0 (embeddings) ... L (top layer).

    Parameters
    ----------
    backbone : transformers.PreTrainedModel
        The encoder whose parameters are mapped.

    Returns
    -------
    dict of str -> int
        The depth of each parameter, by its name in ``backbone.named_parameters()``.

    Warns
    -----
    UserWarning
        If no parameter name has a layer number (then only the embeddings are below the top).
    """
    depths, numbered = _depths(backbone)
    if not numbered:
        _warn_unnumbered(backbone)
    return depths


def _warn_unnumbered(backbone) -> None:
    warnings.warn(
        f"{type(backbone).__name__}: no numbered layers found in its parameter names, so "
        "layer_lr_decay applies to the embeddings only; the other encoder weights get "
        "learning_rate.",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


def _check_rates(learning_rate, layer_lr_decay, top_learning_rate, weight_decay) -> None:
    """The ranges the estimators' parameter checks hold their values to."""
    checks = (
        ("learning_rate", learning_rate, "a finite float > 0", lambda v: v > 0),
        ("layer_lr_decay", layer_lr_decay, "a float in (0, 1]", lambda v: 0 < v <= 1),
        ("top_learning_rate", top_learning_rate, "a finite float > 0 or None", lambda v: v > 0),
        ("weight_decay", weight_decay, "a finite float >= 0", lambda v: v >= 0),
    )
    for name, value, allowed, fits in checks:
        if name == "top_learning_rate" and value is None:
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
            raise TypeError(f"{name}={value!r} is not allowed; use {allowed}.")
        if not math.isfinite(value) or not fits(float(value)):
            raise ValueError(f"{name}={value!r} is not allowed; use {allowed}.")


def layerwise_param_groups(
    network,
    *,
    learning_rate: float,
    layer_lr_decay: float = 1.0,
    top_learning_rate: float | None = None,
    head_learning_rate="deprecated",
    weight_decay: float = 0.01,
    train_backbone: bool = True,
) -> list:
    """Optimizer parameter groups with layer-wise learning-rate decay.

    Parameters
    ----------
    network : torch.nn.Module
        A module with a ``backbone`` attribute (the Hugging Face encoder); every other
        trainable parameter is on top of it (pooling weights, output layer).
    learning_rate : float
        Rate of the top encoder layer (> 0).
    layer_lr_decay : float, default=1.0
        Factor xi per layer down, in (0, 1] (1.0 = no decay; Sun et al. use 0.95).
    top_learning_rate : float or None, default=None
        Rate of the weights on top of the encoder (> 0); None means ``learning_rate``.
    head_learning_rate : float or None, default="deprecated"
        Deprecated spelling of ``top_learning_rate``; when given, its value is used (giving
        both, with other values, is an error).
    weight_decay : float, default=0.01
        AdamW weight decay (>= 0), for parameters with 2 or more dimensions only.
    train_backbone : bool, default=True
        If False, the encoder's parameters are left out (``fine_tune="top"``).

    Returns
    -------
    list of dict
        Groups for ``torch.optim.AdamW``, each with ``params``, ``lr``, ``weight_decay`` and a
        ``name`` such as ``"layer 3"``, ``"embeddings"`` or ``"top"``, sorted from the
        embeddings up.

    Raises
    ------
    ValueError
        For a rate, decay factor or weight decay out of its range (or not finite).
    TypeError
        For a rate, decay factor or weight decay that is not a number (a bool is not), a
        ``train_backbone`` that is not a bool, or a ``network`` without a ``backbone``.

    Notes
    -----
    A parameter's depth is its layer's number in its name (``layer.<i>.``, ``layers.<i>.``:
    layer ``i + 1``); the embeddings are 0; weights every layer reads (a pooler, DeBERTa's
    ``rel_embeddings``, MPNet's ``relative_attention_bias``) count as the top layer (see
    :func:`parameter_depths`). ALBERT shares one set of layer weights among all its layers (per
    group): a shared weight cannot have a rate per layer, so each group gets the rate of the
    top layer it serves (with one group, ``learning_rate``), and the embeddings and
    ``embedding_hidden_mapping_in`` ``learning_rate * layer_lr_decay ** L``: for ALBERT the
    decay slows the embeddings only (and lower groups, where there are several). The
    estimators' ``top_learning_rate`` defaults to 1e-3, this function's to ``learning_rate``:
    pass the estimator's to see the groups it trains.
    """
    backbone = getattr(network, "backbone", None)
    if not isinstance(network, torch.nn.Module) or not isinstance(backbone, torch.nn.Module):
        raise TypeError(
            f"network must be a torch module with a Hugging Face encoder as its .backbone (an "
            f"skbert network, e.g. a fitted estimator's network_); got {type(network).__name__}."
        )
    if not isinstance(train_backbone, (bool, np.bool_)):
        raise TypeError(f"train_backbone={train_backbone!r} is not allowed; use True or False.")
    n_layers = int(backbone.config.num_hidden_layers)
    if head_learning_rate != NOT_GIVEN:
        warn_head_learning_rate(stacklevel=2)  # the caller of this function
        if top_learning_rate is not None and head_learning_rate != top_learning_rate:
            raise ValueError(
                f"head_learning_rate={head_learning_rate!r} and top_learning_rate="
                f"{top_learning_rate!r} name one rate; give top_learning_rate only."
            )
    top_learning_rate = read_top_learning_rate(top_learning_rate, head_learning_rate)
    _check_rates(learning_rate, layer_lr_decay, top_learning_rate, weight_decay)
    top_lr = learning_rate if top_learning_rate is None else top_learning_rate
    backbone_ids = {id(p) for p in backbone.parameters()}
    groups: dict = {}

    def add(key, name, lr, param):
        decay = weight_decay if param.ndim > 1 else 0.0
        group = groups.setdefault(
            (key, decay), {"params": [], "lr": lr, "weight_decay": decay, "name": name}
        )
        group["params"].append(param)

    if train_backbone:
        depths, numbered = _depths(backbone)
        if not numbered and layer_lr_decay != 1:  # no decay asked for: nothing to warn of
            _warn_unnumbered(backbone)
        for pname, param in backbone.named_parameters():
            if not param.requires_grad:
                continue
            depth = depths[pname]
            lr = learning_rate * layer_lr_decay ** (n_layers - depth)
            add(depth, "embeddings" if depth == 0 else f"layer {depth}", lr, param)
    for param in network.parameters():
        if id(param) not in backbone_ids and param.requires_grad:
            add(n_layers + 1, "top", top_lr, param)
    return [groups[key] for key in sorted(groups, key=lambda k: (k[0], -k[1]))]
