"""The read-out settings of a fit, resolved once against the model: :func:`resolve_readout`.

How a text becomes a vector is set by eleven estimator parameters (truncation, lengths,
layers, pooling, ...), some of which only mean something once the model is known
(``max_length=None`` is the model's limit, ``layer=-1`` its last layer). ``fit`` (in
:mod:`skbert._estimator.base`) resolves them into one frozen
:class:`~skbert._nn.readout.Readout`, which the encoding (:mod:`skbert._text.encoding`), the
network (:mod:`skbert._nn.network`) and the feature cache's key all read, so that no module
interprets the raw parameters again.
"""

from __future__ import annotations

import sys
import warnings

from .._core.messages import user_stacklevel
from .._nn.backbone import UNTRAINED_POOLER
from .._nn.readout import Readout
from ..pooling import TRAINABLE_CHUNK_POOLINGS, TRAINABLE_POOLINGS
from .validation import check_kernel_sizes, check_layers

__all__ = ["check_readout_parameters", "refuse_untrained", "resolve_readout"]


def check_readout_parameters(params: dict, trains: bool = True) -> None:
    """The read-out checks that need no model, run before it loads (a bad ``layer`` form,
    CNN kernel sizes or ``pooling="pooler"`` on concatenated layers failed only after the
    weights loaded, or were downloaded); the ranges that need the model wait for
    :func:`resolve_readout`.

    Parameters
    ----------
    params : dict
        The estimator's parameters (``get_params()``).
    trains : bool, default=True
        Whether the fit trains; one that does not refuses a pooling with weights of its own
        (as :func:`refuse_untrained` says).

    Raises
    ------
    TypeError, ValueError
        As :func:`resolve_readout` does for these parameters.
    """
    layers = check_layers(params["layer"], sys.maxsize)  # its form; its range needs the model
    check_kernel_sizes(params.get("cnn_kernel_sizes", (1, 3, 5)))
    _refuse_wide_pooler(params, layers, "the encoder's hidden size")
    if not trains:
        names = (
            [f"pooling={params['pooling']!r}"] if params["pooling"] in TRAINABLE_POOLINGS else []
        )
        if params["truncation"] == "chunks" and params["chunk_pooling"] in TRAINABLE_CHUNK_POOLINGS:
            names.append(f"chunk_pooling={params['chunk_pooling']!r}")
        refuse_untrained(names, params["fine_tune"])


def refuse_untrained(names: list, fine_tune) -> None:
    """Refuse the poolings ``names`` (``"pooling='cnn'"``, ...), whose weights a fit that
    trains nothing (``fine_tune``) would leave random."""
    if names:
        raise ValueError(
            f"{' and '.join(names)} has weights of its own that must be trained, and "
            f"fine_tune={fine_tune!r} trains nothing. Either train them on labelled "
            "data (fit(X, y)): fine_tune='top' trains them on top of the frozen encoder, "
            "fine_tune='full' the encoder too; or, for frozen features, use a pooling "
            "without weights: pooling='cls', 'mean' or 'max' and chunk_pooling='mean' or "
            "'max'."
        )


def resolve_readout(params: dict, config, specials, max_model_length: int) -> Readout:
    """Check the read-out parameters against the model and resolve them into a
    :class:`~skbert._nn.readout.Readout`.

    Parameters
    ----------
    params : dict
        The estimator's parameters (``get_params()``); the read-out ones are used.
    config : transformers.PretrainedConfig
        The model's configuration.
    specials : skbert._nn.backbone.SpecialTokens
        Where the tokenizer puts its special tokens.
    max_model_length : int
        The longest input the model accepts.

    Returns
    -------
    Readout

    Raises
    ------
    ValueError
        For a ``max_length`` above the model's limit or leaving no room for text after the
        special tokens, a ``head_length`` that leaves no tail,
        a ``layer`` out of range, ``cnn_kernel_sizes`` that are not positive ints, or
        ``pooling="pooler"`` on concatenated layers.
    """
    max_length = max_model_length if params["max_length"] is None else params["max_length"]
    if max_length > max_model_length:
        raise ValueError(
            f"max_length={params['max_length']} exceeds this model's limit of "
            f"{max_model_length} tokens; use max_length <= {max_model_length} or None (the "
            "model's limit)."
        )
    budget = max_length - specials.n_single
    if budget < 1:  # every text would be its special tokens alone: one vector for all
        raise ValueError(
            f"max_length={max_length} leaves no room for text: this tokenizer adds "
            f"{specials.n_single} special tokens to every input; use max_length >= "
            f"{specials.n_single + 1}."
        )
    if params["truncation"] == "head+tail" and params["head_length"] >= budget:
        raise ValueError(
            f"head_length={params['head_length']} leaves no room for the tail: with "
            f"max_length={max_length} and {specials.n_single} special tokens, "
            f"truncation='head+tail' needs head_length < {budget}."
        )
    n_hidden_states = config.num_hidden_layers + 1
    layers = check_layers(params["layer"], n_hidden_states)
    _refuse_wide_pooler(params, layers, str(config.hidden_size))
    return Readout(
        truncation=params["truncation"],
        max_length=max_length,
        head_length=params["head_length"],
        max_chunks=params["max_chunks"],
        chunk_pooling=params["chunk_pooling"],
        layers=layers,
        layer_combine=params["layer_combine"],
        pooling=params["pooling"],
        hidden_size=config.hidden_size,
        n_hidden_states=n_hidden_states,
        cnn_kernel_sizes=check_kernel_sizes(params.get("cnn_kernel_sizes", (1, 3, 5))),
        cnn_channels=params.get("cnn_channels", 128),
    )


def _refuse_wide_pooler(params: dict, layers: tuple, width: str) -> None:
    if params["pooling"] == "pooler" and len(layers) > 1 and params["layer_combine"] == "concat":
        raise ValueError(
            f"pooling='pooler' reads one hidden state per token (the pooler's dense layer takes "
            f"{width} values), but layer={params['layer']!r} with layer_combine='concat' "
            "widens it; use one layer, or layer_combine='mean' or 'max'."
        )


def warn_untrained_pooler(model, backbone, pooling) -> None:
    """Warn that ``pooling="pooler"`` reads random weights, where ``backbone``'s checkpoint
    had no pooler (loaded by a fit, or later by a ``memory=`` fit's deferred network)."""
    if pooling == "pooler" and getattr(backbone, UNTRAINED_POOLER, False):
        warnings.warn(
            f"model={model!r} has no trained pooler weights (a masked-LM checkpoint, such as "
            "further_pretrain writes from one without them), so pooling='pooler' reads a dense "
            "layer of random values: train it (fine_tune='full' or 'top') or use another "
            "pooling.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
