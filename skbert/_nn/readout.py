"""The read-out of a network: :class:`Readout`, how texts are cut and read out of the encoder.

A frozen record of resolved settings (layers, pooling, lengths, ...), built by
:func:`skbert._estimator.readout.resolve_readout` when an estimator is fitted and read by the
networks (:mod:`skbert._nn.network`), their state format (:mod:`skbert._nn.state`), the encoding
(:mod:`skbert._text.encoding`) and the feature cache's key, so that no module interprets the
estimators' raw parameters again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..pooling import TRAINABLE_CHUNK_POOLINGS, TRAINABLE_POOLINGS

__all__ = ["Readout"]


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
    pooling : {"cls", "mean", "max", "cnn", "pooler"}
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
