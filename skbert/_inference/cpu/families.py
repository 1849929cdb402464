"""The encoder families the tiled CPU layers know: where each keeps the parts of a layer.

:mod:`skbert._inference.cpu.tiled_layers` is one engine for post-norm transformer layers with
exact GELU: query/key/value projections, attention, an output projection added to the input
and layer-normed, a feed-forward pair added and layer-normed again. The families differ in
where their modules keep these parts and in what attention adds to its scores; a
:class:`Family` maps one family's backbone to the engine's pieces:

- BERT (and what shares its modules: RoBERTa, MiniLM, ...): ``encoder.layer[i].attention.self``
  and so on;
- DistilBERT: the same layers under other names (``transformer.layer[i].attention.q_lin``,
  ``sa_layer_norm``, ``ffn.lin1``, ...), no token types;
- MPNet: BERT's layer under other names (``attention.attn.q``, ...) plus a relative position
  bias added to every layer's attention scores: one table per block length, computed once by
  the backbone's own ``encoder.compute_position_bias``.

A family is recognised by its structure (the modules are there, of the expected types, and
the config says exact GELU); the engine then checks its output against the transformers forward
on a probe before it takes the path, so a family whose math differs in a way the structure does
not show is refused there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["FAMILIES", "Family", "LayerParts", "family_of"]


@dataclass(frozen=True)
class LayerParts:
    """The modules of one post-norm layer, as the engine reads them."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    attention_output: nn.Linear
    attention_norm: nn.LayerNorm
    inner: nn.Linear
    output: nn.Linear
    output_norm: nn.LayerNorm


class Family(ABC):
    """One family's layout; subclasses say where the parts are.

    ``name`` is what the tests and messages call it.
    """

    name = "family"

    @abstractmethod
    def layers(self, backbone):
        """The backbone's layers (an ``nn.ModuleList``), or None when it has none here."""

    @abstractmethod
    def parts(self, layer) -> LayerParts:
        """The parts of ``layer``; raises ``AttributeError`` where one is missing."""

    @abstractmethod
    def config_fits(self, config) -> bool:
        """Whether the config describes the math the engine computes (exact GELU, ...)."""

    def width(self, config) -> tuple:
        """``(hidden size, attention heads)``."""
        return getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", 0)

    def attention_bias(self, backbone):
        """None, or a function ``length -> tensor`` of what attention adds to its scores in
        a block of that length, of shape ``(1, heads, length, length)``."""
        return None

    def fits(self, backbone) -> bool:
        """Whether ``backbone`` has this family's structure."""
        config = getattr(backbone, "config", None)
        layers = self.layers(backbone)
        if config is None or not isinstance(layers, nn.ModuleList) or not len(layers):
            return False
        if not hasattr(backbone, "embeddings") or not self.config_fits(config):
            return False
        if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
            return False
        hidden, heads = self.width(config)
        if not isinstance(hidden, int) or not heads or hidden % heads:
            return False
        return all(self._layer_fits(layer, hidden) for layer in layers)

    def _layer_fits(self, layer, hidden: int) -> bool:
        try:
            parts = self.parts(layer)
        except AttributeError:
            return False
        linears = (parts.query, parts.key, parts.value, parts.attention_output)
        linears += (parts.inner, parts.output)
        norms = (parts.attention_norm, parts.output_norm)
        if not all(type(m) is nn.Linear and m.bias is not None for m in linears):
            return False
        if not all(type(n) is nn.LayerNorm and n.elementwise_affine for n in norms):
            return False
        if norms[0].eps != norms[1].eps or norms[0].normalized_shape != (hidden,):
            return False
        return not hasattr(layer, "crossattention")


class Bert(Family):
    """BERT's modules: RoBERTa, MiniLM, XLM-R and others that reuse them."""

    name = "bert"

    def layers(self, backbone):
        return getattr(getattr(backbone, "encoder", None), "layer", None)

    def parts(self, layer) -> LayerParts:
        attention = layer.attention
        return LayerParts(
            attention.self.query,
            attention.self.key,
            attention.self.value,
            attention.output.dense,
            attention.output.LayerNorm,
            layer.intermediate.dense,
            layer.output.dense,
            layer.output.LayerNorm,
        )

    def config_fits(self, config) -> bool:
        absolute = getattr(config, "position_embedding_type", "absolute") == "absolute"
        return getattr(config, "hidden_act", None) == "gelu" and absolute


class DistilBert(Family):
    """DistilBERT: BERT's layer under other names."""

    name = "distilbert"

    def layers(self, backbone):
        return getattr(getattr(backbone, "transformer", None), "layer", None)

    def parts(self, layer) -> LayerParts:
        attention, ffn = layer.attention, layer.ffn
        return LayerParts(
            attention.q_lin,
            attention.k_lin,
            attention.v_lin,
            attention.out_lin,
            layer.sa_layer_norm,
            ffn.lin1,
            ffn.lin2,
            layer.output_layer_norm,
        )

    def config_fits(self, config) -> bool:
        return getattr(config, "activation", None) == "gelu"

    def width(self, config) -> tuple:
        return getattr(config, "dim", None), getattr(config, "n_heads", 0)


class MPNet(Family):
    """MPNet: BERT's layer under other names, with a relative position bias in attention."""

    name = "mpnet"

    def layers(self, backbone):
        encoder = getattr(backbone, "encoder", None)
        if not isinstance(getattr(encoder, "relative_attention_bias", None), nn.Embedding):
            return None
        if not callable(getattr(encoder, "compute_position_bias", None)):
            return None
        return getattr(encoder, "layer", None)

    def parts(self, layer) -> LayerParts:
        attention = layer.attention
        return LayerParts(
            attention.attn.q,
            attention.attn.k,
            attention.attn.v,
            attention.attn.o,
            attention.LayerNorm,
            layer.intermediate.dense,
            layer.output.dense,
            layer.output.LayerNorm,
        )

    def config_fits(self, config) -> bool:
        return getattr(config, "hidden_act", None) == "gelu"

    def attention_bias(self, backbone):
        encoder = backbone.encoder
        device = encoder.relative_attention_bias.weight.device

        def bias(length: int) -> torch.Tensor:
            # the backbone's own function, on a stand-in of one row of `length` tokens
            return encoder.compute_position_bias(torch.empty((1, length, 0), device=device)).float()

        return bias


#: the families in the order they are tried (the first whose structure fits is taken)
FAMILIES = (Bert(), DistilBert(), MPNet())


def family_of(backbone) -> Family | None:
    """The family whose structure ``backbone`` has, or None."""
    for family in FAMILIES:
        if family.fits(backbone):
            return family
    return None
