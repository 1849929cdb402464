"""The encoder families the tiled CPU layers know: where each keeps the parts of a layer.

:mod:`skbert._inference.cpu.tiled_layers` is one engine for transformer layers with exact
GELU: query/key/value projections, attention, an output projection added to the input, a
feed-forward pair added again, with a layer norm after each sum (post-norm: BERT) or before
attention and the feed-forward pair (pre-norm: ModernBERT, whose stack ends in a final norm).
The families differ in where their modules keep these parts, in what attention does to its
queries and keys (rotary positions) and adds to its scores, and in the feed-forward pair
(plain, or ModernBERT's gated GELU); a :class:`Family` maps one family's backbone to the
engine's pieces:

- BERT (and what shares its modules: RoBERTa, MiniLM, ...): ``encoder.layer[i].attention.self``
  and so on;
- DistilBERT: the same layers under other names (``transformer.layer[i].attention.q_lin``,
  ``sa_layer_norm``, ``ffn.lin1``, ...), no token types;
- MPNet: BERT's layer under other names (``attention.attn.q``, ...) plus a relative position
  bias added to every layer's attention scores: one table per block length, computed once by
  the backbone's own ``encoder.compute_position_bias``;
- DeBERTa-v2 / v3: BERT's layer with ``query_proj`` and so on, and disentangled attention:
  scores from the relative position embeddings added to the content scores, which depend on
  the block's queries and keys (:class:`DebertaV2`);
- ModernBERT: pre-norm layers (``layers[i].attn.Wqkv``, one projection for query, key and
  value; no norm before the first layer's attention), a gated GELU feed-forward pair
  (``mlp.Wi`` makes two halves, GELU of the first times the second, into ``mlp.Wo``), usually
  no biases, rotary positions with their own base for global and local layers, local layers
  that attend within a sliding window, and a final norm (:class:`ModernBert`).

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

__all__ = ["FAMILIES", "Family", "LayerParts", "ModernBert", "family_of"]


@dataclass(frozen=True)
class LayerParts:
    """The modules of one layer, as the engine reads them.

    ``projections`` are the query, key and value projections, or one projection that makes
    all three (its outputs query, key and value laid end to end, as ModernBERT's ``Wqkv``).
    ``pre_norm``: ``attention_norm`` (None: no norm, as before ModernBERT's first attention)
    normalises the layer's input before the projections and ``output_norm`` the sum before
    the feed-forward pair, whose output is added to that sum un-normed; else (post-norm) they
    normalise the two sums. ``gated``: ``inner`` makes two halves, and what goes into
    ``output`` is GELU of the first times the second; else GELU of all of it.
    """

    projections: tuple
    attention_output: nn.Linear
    attention_norm: nn.LayerNorm | None
    inner: nn.Linear
    output: nn.Linear
    output_norm: nn.LayerNorm
    pre_norm: bool = False
    gated: bool = False


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

    def score_scale(self, config, head_size: int) -> float:
        """What attention multiplies ``query @ key.T`` by: ``1 / sqrt(head size)``."""
        return head_size**-0.5

    def score_bias(self, backbone):
        """None, or a function ``(layer index, query, key, length, memo) -> tensor or None``
        of what attention adds to its scaled scores in a block: query and key in float32, of
        shape ``(rows, heads, length, head size)``, the result broadcastable to ``(rows,
        heads, length, length)`` (a boolean one: which scores are kept; None: nothing);
        ``memo`` is a dict of one tiled forward, for what does not depend on the block's rows
        (computed once per block length or per layer)."""
        return None

    def rotation(self, backbone):
        """None, or a function ``(layer index, query, key, length, memo) -> (query, key)`` that
        attention applies to a block's queries and keys (float32, ``(rows, heads, length, head
        size)``) before their scores: rotary positions."""
        return None

    def final_norm(self, backbone):
        """The ``nn.LayerNorm`` applied to the last layer's output, or None."""
        return None

    def probe_length(self, config) -> int:
        """Tokens per row of the probe the engine checks against the transformers forward:
        enough for every part of the math to show (a sliding window's edge)."""
        return 6

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
        projections = tuple(parts.projections)
        linears = (*projections, parts.attention_output, parts.inner, parts.output)
        if not all(type(m) is nn.Linear for m in linears):
            return False
        if len({m.bias is None for m in projections}) != 1:  # biases on all or on none
            return False
        if sum(m.out_features for m in projections) != 3 * hidden:
            return False
        inner = parts.output.in_features * (2 if parts.gated else 1)
        if parts.inner.out_features != inner or parts.attention_output.out_features != hidden:
            return False
        norms = [parts.output_norm]
        if parts.attention_norm is not None or not parts.pre_norm:
            norms.append(parts.attention_norm)
        if not all(_plain_norm(n, hidden) for n in norms):
            return False
        return not hasattr(layer, "crossattention")


def _plain_norm(norm, hidden: int) -> bool:
    """Whether ``norm`` is an ``nn.LayerNorm`` over ``hidden`` with its weight (and maybe a
    bias), as the engine computes it."""
    return (
        type(norm) is nn.LayerNorm
        and norm.elementwise_affine
        and tuple(norm.normalized_shape) == (hidden,)
    )


class Bert(Family):
    """BERT's modules: RoBERTa, MiniLM, XLM-R and others that reuse them."""

    name = "bert"

    def layers(self, backbone):
        return getattr(getattr(backbone, "encoder", None), "layer", None)

    #: names of the query, key and value projections in ``layer.attention.self``
    projections = ("query", "key", "value")

    def parts(self, layer) -> LayerParts:
        attention = layer.attention
        projections = tuple(getattr(attention.self, name) for name in self.projections)
        return LayerParts(
            projections,
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
            (attention.q_lin, attention.k_lin, attention.v_lin),
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
            (attention.attn.q, attention.attn.k, attention.attn.v),
            attention.attn.o,
            attention.LayerNorm,
            layer.intermediate.dense,
            layer.output.dense,
            layer.output.LayerNorm,
        )

    def config_fits(self, config) -> bool:
        return getattr(config, "hidden_act", None) == "gelu"

    def score_bias(self, backbone):
        encoder = backbone.encoder
        device = encoder.relative_attention_bias.weight.device

        def bias(index, query, key, length, memo) -> torch.Tensor:
            if length not in memo:  # the same in every layer: the backbone's own function,
                # on a stand-in of one row of `length` tokens
                stand_in = torch.empty((1, length, 0), device=device)
                memo[length] = encoder.compute_position_bias(stand_in).float()
            return memo[length]

        return bias


class DebertaV2(Bert):
    """DeBERTa-v2 and v3: BERT's layer with ``*_proj`` projections, and disentangled attention
    (content-to-position and position-to-content scores from relative position embeddings,
    bucketed).

    Per block, the content-to-position scores are ``query @ pos_key.T`` gathered at each pair's
    relative position, the position-to-content ones ``key @ pos_query.T`` gathered and
    transposed, both divided by the scores' scale, as transformers computes them, but against
    only the relative embeddings that a block of its length reaches (about twice its length of
    the 512 of DeBERTa-v3's 256 buckets). The projections of the relative embeddings
    (``pos_key``, ``pos_query``) are computed once per layer and tiled forward, the relative
    positions once per block length; the encoder's own functions give both.
    """

    name = "deberta-v2"

    def layers(self, backbone):
        encoder = getattr(backbone, "encoder", None)
        if getattr(encoder, "conv", None) is not None:  # v2-xlarge's convolution: not here
            return None
        if not all(hasattr(encoder, f) for f in ("get_rel_pos", "get_rel_embedding")):
            return None
        return getattr(encoder, "layer", None)

    projections = ("query_proj", "key_proj", "value_proj")  # in BERT's layout otherwise

    def config_fits(self, config) -> bool:
        hidden, heads = self.width(config)
        types = set(getattr(config, "pos_att_type", None) or [])
        head_size = getattr(config, "attention_head_size", None)
        return (
            getattr(config, "hidden_act", None) == "gelu"
            and types <= {"c2p", "p2c"}
            and (head_size is None or (heads and head_size * heads == hidden))
        )

    def score_scale(self, config, head_size: int) -> float:
        types = set(getattr(config, "pos_att_type", None) or [])
        return (head_size * (1 + len(types))) ** -0.5

    def score_bias(self, backbone):
        config, encoder = backbone.config, backbone.encoder
        types = set(config.pos_att_type or [])
        if not getattr(config, "relative_attention", False) or not types:
            return None  # no disentangled scores: plain scaled products (score_scale's)
        attentions = [layer.attention.self for layer in encoder.layer]
        scale = self.score_scale(config, attentions[0].attention_head_size)
        device = encoder.rel_embeddings.weight.device

        def projected(index, memo):
            """``(pos_key, pos_query)`` of layer ``index``, ``(heads, 2 span, head size)``."""
            key = ("projected", index)
            if key not in memo:
                if "relative" not in memo:
                    memo["relative"] = encoder.get_rel_embedding()
                attention = attentions[index]
                rel = memo["relative"][: 2 * attention.pos_ebd_size]
                shared = attention.share_att_key
                heads = attention.num_attention_heads

                def heads_first(linear):
                    return linear(rel).float().view(len(rel), heads, -1).transpose(0, 1)

                pos_key = pos_query = None
                if "c2p" in types:
                    pos_key = heads_first(attention.key_proj if shared else attention.pos_key_proj)
                if "p2c" in types:
                    linear = attention.query_proj if shared else attention.pos_query_proj
                    pos_query = heads_first(linear)
                memo[key] = (pos_key, pos_query)
            return memo[key]

        def bias(index, query, key, length, memo) -> torch.Tensor:
            span = attentions[index].pos_ebd_size
            where = ("positions", length, span)
            if where not in memo:
                stand_in = torch.empty((1, length, 0), device=device)
                relative = encoder.get_rel_pos(stand_in).reshape(length, length).long()
                # only the relative embeddings a block of this length reaches: a slice
                memo[where] = tuple(
                    _reached(torch.clamp(sign * relative + span, 0, 2 * span - 1))
                    for sign in (1, -1)
                )
            (c2p, c2p_rows), (p2c, p2c_rows) = memo[where]
            pos_key, pos_query = projected(index, memo)
            shape = (*query.shape[:2], length, length)
            score = 0
            if pos_key is not None:
                reached = query @ pos_key[:, c2p_rows].transpose(-1, -2)
                score = torch.gather(reached, -1, c2p.expand(shape))
            if pos_query is not None:
                reached = key @ pos_query[:, p2c_rows].transpose(-1, -2)
                score = score + torch.gather(reached, -1, p2c.expand(shape)).transpose(-1, -2)
            return score * scale

        return bias


def _reached(index: torch.Tensor) -> tuple:
    """``(index - first, slice(first, last + 1))``: the indices into the slice of the rows
    they reach, and that slice."""
    first, last = int(index.min()), int(index.max())
    return index - first, slice(first, last + 1)


class ModernBert(Family):
    """ModernBERT: pre-norm layers with a gated GELU, rotary positions, local (sliding window)
    and global attention, a final norm.

    A layer's kind is ``config.layer_types[i]`` (``"full_attention"`` or
    ``"sliding_attention"``), as transformers reads it: the kind picks the rotary table (each
    kind has its own base, ``rope_parameters``), computed once per block length by the
    backbone's own ``rotary_emb``, and a local layer keeps only the scores of tokens at most
    ``config.sliding_window`` apart (half of ``local_attention``; a block no longer than that
    plus one is attended whole). ``hidden_states`` end, as transformers gives them from 5.0
    on, in the final norm of the last layer's output.
    """

    name = "modernbert"

    #: the kinds of layer transformers knows, and the one with a sliding window
    kinds = ("full_attention", "sliding_attention")
    local = "sliding_attention"

    def layers(self, backbone):
        if not isinstance(getattr(backbone, "final_norm", None), nn.LayerNorm):
            return None
        if not callable(getattr(backbone, "rotary_emb", None)):
            return None  # before transformers 5, every attention had its own
        return getattr(backbone, "layers", None)

    def parts(self, layer) -> LayerParts:
        attention, mlp, norm = layer.attn, layer.mlp, layer.attn_norm
        return LayerParts(
            (attention.Wqkv,),
            attention.Wo,
            None if type(norm) is nn.Identity else norm,
            mlp.Wi,
            mlp.Wo,
            layer.mlp_norm,
            pre_norm=True,
            gated=True,
        )

    def config_fits(self, config) -> bool:
        kinds = list(getattr(config, "layer_types", None) or [])
        return (
            getattr(config, "hidden_activation", None) == "gelu"
            and len(kinds) == getattr(config, "num_hidden_layers", -1)
            and set(kinds) <= set(self.kinds)
            and isinstance(getattr(config, "sliding_window", None), int)
        )

    def final_norm(self, backbone):
        return backbone.final_norm

    def probe_length(self, config) -> int:
        return max(super().probe_length(config), config.sliding_window + 2)

    def rotation(self, backbone):
        rotary, kinds = backbone.rotary_emb, list(backbone.config.layer_types)

        def rotate(index, query, key, length, memo) -> tuple:
            where = ("rotary", kinds[index], length)
            if where not in memo:
                stand_in = torch.empty((1, length, 0), device=query.device)  # float32
                positions = torch.arange(length, device=query.device).unsqueeze(0)
                cos, sin = rotary(stand_in, positions, kinds[index])
                memo[where] = (cos.float().unsqueeze(1), sin.float().unsqueeze(1))
            cos, sin = memo[where]
            return _rotated(query, cos, sin), _rotated(key, cos, sin)

        return rotate

    def score_bias(self, backbone):
        kinds, window = list(backbone.config.layer_types), backbone.config.sliding_window

        def bias(index, query, key, length, memo):
            if kinds[index] != self.local or length <= window + 1:
                return None  # every pair within the window
            where = ("window", length)
            if where not in memo:
                positions = torch.arange(length, device=query.device)
                memo[where] = (positions[:, None] - positions[None, :]).abs() <= window
            return memo[where]

        return bias


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions on ``x`` (``(rows, heads, length, head size)``): each half of a head
    rotated with the other, ``x * cos + (-second, first) * sin``."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


#: the families in the order they are tried (the first whose structure fits is taken)
FAMILIES = (Bert(), DistilBert(), MPNet(), DebertaV2(), ModernBert())


def family_of(backbone) -> Family | None:
    """The family whose structure ``backbone`` has, or None."""
    for family in FAMILIES:
        if family.fits(backbone):
            return family
    return None
