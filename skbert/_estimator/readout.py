"""The read-out settings of a fit, resolved once against the model: :class:`Readout`.

How a text becomes a vector is set by eleven estimator parameters (truncation, lengths,
layers, pooling, ...), some of which only mean something once the model is known
(``max_length=None`` is the model's limit, ``layer=-1`` its last layer). ``fit`` resolves them
into one frozen :class:`Readout`, which the encoding (:mod:`skbert._text.encoding`), the network
(:mod:`skbert._nn.network`) and the feature cache's key all read, so that no module interprets
the raw parameters again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..pooling import TRAINABLE_CHUNK_POOLINGS, TRAINABLE_POOLINGS
from .validation import check_kernel_sizes, check_layers

__all__ = ["Readout", "resolve_readout"]


@dataclass(frozen=True)
class Readout:
    """How texts are cut and read out of the encoder; see the estimators' parameters.

    Attributes
    ----------
    truncation : {"head", "tail", "head+tail", "chunks"}
        What to keep of a long text.
    max_length : int
        Tokens per model input, special tokens included (resolved: never None).
    head_length : int
        Tokens kept from the start of a text by ``"head+tail"``.
    max_chunks : int or None
        Windows kept per text by ``"chunks"``.
    chunk_pooling : {"mean", "max", "attention"}
        How the windows of one text are combined by ``"chunks"``.
    layers : tuple of int
        Non-negative indices of the hidden states read.
    layer_combine : {"concat", "mean", "max"}
        How the token states of several layers are combined.
    pooling : {"cls", "mean", "max", "cnn"}
        How token states become one vector.
    hidden_size : int
        Width of one hidden state of the encoder.
    n_hidden_states : int
        Hidden states the encoder returns (its layers + 1).
    cnn_kernel_sizes : tuple of int
        Convolution widths of ``pooling="cnn"``.
    cnn_channels : int
        Channels per convolution of ``pooling="cnn"``.
    """

    truncation: str
    max_length: int
    head_length: int
    max_chunks: int | None
    chunk_pooling: str
    layers: tuple
    layer_combine: str
    pooling: str
    hidden_size: int
    n_hidden_states: int
    cnn_kernel_sizes: tuple = (1, 3, 5)
    cnn_channels: int = 128

    @property
    def chunked(self) -> bool:
        """Whether long texts are cut into windows that are encoded separately."""
        return self.truncation == "chunks"

    @property
    def token_dim(self) -> int:
        """Width of the (combined) token states that the pooling reads."""
        if self.layer_combine == "concat":
            return self.hidden_size * len(self.layers)
        return self.hidden_size

    @property
    def output_dim(self) -> int:
        """Width of the text vectors."""
        if self.pooling == "cnn":
            return self.cnn_channels * len(self.cnn_kernel_sizes)
        return self.token_dim

    @property
    def untrained_weights(self) -> list:
        """The parameters naming a pooling with weights of its own, which must be trained."""
        names = []
        if self.pooling in TRAINABLE_POOLINGS:
            names.append(f"pooling={self.pooling!r}")
        if self.chunked and self.chunk_pooling in TRAINABLE_CHUNK_POOLINGS:
            names.append(f"chunk_pooling={self.chunk_pooling!r}")
        return names

    def encoding_key(self) -> dict:
        """The settings that decide a text's model rows (for the feature cache's key)."""
        return {
            "truncation": self.truncation,
            "max_length": self.max_length,
            "head_length": self.head_length if self.truncation == "head+tail" else None,
            "max_chunks": self.max_chunks if self.chunked else None,
            "chunk_pooling": self.chunk_pooling if self.chunked else None,
        }


def resolve_readout(params: dict, config, specials, max_model_length: int) -> Readout:
    """Check the read-out parameters against the model and resolve them into a :class:`Readout`.

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
        For a ``max_length`` above the model's limit, a ``head_length`` that leaves no tail,
        a ``layer`` out of range, or ``cnn_kernel_sizes`` that are not positive ints.
    """
    max_length = max_model_length if params["max_length"] is None else params["max_length"]
    if max_length > max_model_length:
        raise ValueError(
            f"max_length={params['max_length']} exceeds this model's limit of "
            f"{max_model_length} tokens; use max_length <= {max_model_length} or None (the "
            "model's limit)."
        )
    budget = max_length - specials.n_single
    if params["truncation"] == "head+tail" and params["head_length"] >= budget:
        raise ValueError(
            f"head_length={params['head_length']} leaves no room for the tail: with "
            f"max_length={max_length} and {specials.n_single} special tokens, "
            f"truncation='head+tail' needs head_length < {budget}."
        )
    n_hidden_states = config.num_hidden_layers + 1
    return Readout(
        truncation=params["truncation"],
        max_length=max_length,
        head_length=params["head_length"],
        max_chunks=params["max_chunks"],
        chunk_pooling=params["chunk_pooling"],
        layers=check_layers(params["layer"], n_hidden_states),
        layer_combine=params["layer_combine"],
        pooling=params["pooling"],
        hidden_size=config.hidden_size,
        n_hidden_states=n_hidden_states,
        cnn_kernel_sizes=check_kernel_sizes(params.get("cnn_kernel_sizes", (1, 3, 5))),
        cnn_channels=params.get("cnn_channels", 128),
    )
