"""The network: encoder -> chosen layers -> token pooling -> chunk pooling."""

from __future__ import annotations

import inspect

import torch
from torch import nn

__all__ = ["SentenceEncoder", "TaskNetwork", "SiameseNetwork", "MaskedLMNetwork", "check_layers"]


def check_layers(layer, n_hidden_states: int) -> tuple:
    """Normalise ``layer`` to a tuple of indices into the hidden states and check the range.

    Parameters
    ----------
    layer : int or tuple of int
        0 is the embedding output, -1 the last layer.
    n_hidden_states : int
        Number of hidden states the encoder returns (its layers + 1).
    """
    layers = (layer,) if isinstance(layer, int) else tuple(layer)
    if not layers:
        raise ValueError("layer=() is empty; give an int or a non-empty tuple of ints.")
    for value in layers:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"layer={layer!r} must be an int or a tuple of ints.")
        if not -n_hidden_states <= value < n_hidden_states:
            raise ValueError(
                f"layer={layer!r} is out of range: this model has {n_hidden_states} hidden "
                f"states (0 = embeddings ... {n_hidden_states - 1} = last layer), so each index "
                f"must be in [{-n_hidden_states}, {n_hidden_states - 1}]."
            )
    return tuple(value % n_hidden_states for value in layers)


class SentenceEncoder(nn.Module):
    """Encode token ids into one vector per text.

    Parameters
    ----------
    backbone : transformers.PreTrainedModel
        An encoder loaded with ``AutoModel``.
    layers : tuple of int
        Non-negative indices into the hidden states (see :func:`check_layers`).
    layer_combine : {"concat", "mean", "max"}
        How the token states of several layers are combined, before pooling.
    pooling : nn.Module
        Token pooling: ``(states, mask) -> vectors``.
    chunk_pooling : nn.Module
        Chunk pooling: ``(vectors, owner, n_texts) -> text vectors``.
    """

    def __init__(self, backbone, layers, layer_combine, pooling, chunk_pooling):
        super().__init__()
        self.backbone = backbone
        self.layers = tuple(layers)
        self.layer_combine = layer_combine
        self.pooling = pooling
        self.chunk_pooling = chunk_pooling
        params = inspect.signature(backbone.forward).parameters
        self.uses_token_types = "token_type_ids" in params
        self.n_hidden_states = backbone.config.num_hidden_layers + 1

    @property
    def token_dim(self) -> int:
        """Width of the combined token states that the pooling reads."""
        hidden = self.backbone.config.hidden_size
        return hidden * len(self.layers) if self.layer_combine == "concat" else hidden

    @property
    def output_dim(self) -> int:
        """Width of the output vectors."""
        return getattr(self.pooling, "output_dim", self.token_dim)

    def token_states(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """Token states of the chosen layers, combined: ``(batch, seq, dim)``."""
        last_only = self.layers == (self.n_hidden_states - 1,)
        # A batch without padding needs no mask; without one, attention takes its fast path.
        full = not self.training and bool(attention_mask.all())
        kwargs = {"input_ids": input_ids, "attention_mask": None if full else attention_mask}
        if self.uses_token_types and token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        out = self.backbone(**kwargs, output_hidden_states=not last_only, return_dict=True)
        if last_only:
            return out.last_hidden_state
        states = [out.hidden_states[i] for i in self.layers]
        if len(states) == 1:
            return states[0]
        if self.layer_combine == "concat":
            return torch.cat(states, dim=-1)
        stacked = torch.stack(states, dim=0)
        return stacked.mean(dim=0) if self.layer_combine == "mean" else stacked.amax(dim=0)

    def all_layer_rows(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """[CLS], mean and max pooling of every hidden state, from one forward pass.

        Returns ``(n_rows, 3, n_hidden_states, hidden)``; :meth:`combine_all_layers` pools the
        chunks of a text. Feeds the frozen-feature cache.
        """
        from .pooling import make_pooling

        full = not self.training and bool(attention_mask.all())
        kwargs = {"input_ids": input_ids, "attention_mask": None if full else attention_mask}
        if self.uses_token_types and token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        out = self.backbone(**kwargs, output_hidden_states=True, return_dict=True)
        per_pooling = []
        for name in ("cls", "mean", "max"):
            pool = make_pooling(name)
            per_pooling.append(torch.stack([pool(h, attention_mask) for h in out.hidden_states], 1))
        return torch.stack(per_pooling, dim=1)  # (rows, 3, layers, hidden)

    def combine_all_layers(self, rows, owner=None, n_texts=None) -> torch.Tensor:
        """:meth:`combine` for :meth:`all_layer_rows` output, per pooling and layer."""
        if owner is None:
            return rows
        shape = rows.shape[1:]
        combined = self.chunk_pooling(rows.reshape(len(rows), -1), owner, n_texts)
        return combined.reshape(n_texts, *shape)

    # Pickling: transformers 5 attaches hooks made of local functions to its models, which
    # pickle cannot store; the backbone travels as (class, config, CPU state dict) instead.
    def __getstate__(self):
        state = self.__dict__.copy()
        modules = dict(state["_modules"])
        backbone = modules.pop("backbone")
        weights = {k: v.detach().cpu() for k, v in backbone.state_dict().items()}
        state["_modules"] = modules
        state["_backbone"] = (type(backbone), backbone.config, weights)
        return state

    def __setstate__(self, state):
        backbone_class, config, weights = state.pop("_backbone")
        backbone = backbone_class(config)
        backbone.load_state_dict(weights)
        backbone.eval()
        state["_modules"] = {"backbone": backbone, **state["_modules"]}
        self.__dict__.update(state)

    def forward(self, input_ids, attention_mask, token_type_ids=None, owner=None, n_texts=None):
        """Return ``(n_texts, output_dim)``; rows sharing an ``owner`` are chunks of one text."""
        rows = self.encode_rows(input_ids, attention_mask, token_type_ids)
        return self.combine(rows, owner, n_texts)

    def encode_rows(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """One pooled vector per row (chunk): ``(n_rows, output_dim)``."""
        states = self.token_states(input_ids, attention_mask, token_type_ids)
        return self.pooling(states, attention_mask)

    def combine(self, rows, owner=None, n_texts=None) -> torch.Tensor:
        """Text vectors from row vectors: the chunks of a text (same ``owner``) pooled."""
        if owner is None:
            return rows
        return self.chunk_pooling(rows, owner, n_texts)


class TaskNetwork(nn.Module):
    """A :class:`SentenceEncoder` with dropout and a linear task head on its vectors.

    Parameters
    ----------
    encoder : SentenceEncoder
    n_outputs : int
        Logits per input (classes, or labels for multi-label).
    dropout : float
        Dropout rate before the head (Sun et al.: 0.1).
    input_multiplier : int, default=1
        Width of the head's input in encoder vectors (3 for SBERT's (u, v, |u - v|)).
    """

    def __init__(self, encoder: SentenceEncoder, n_outputs: int, dropout: float = 0.1,
                 input_multiplier: int = 1):  # fmt: skip
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(encoder.output_dim * input_multiplier, n_outputs)

    @property
    def backbone(self):
        return self.encoder.backbone

    @property
    def output_dim(self) -> int:
        return self.head.out_features

    def forward(self, input_ids, attention_mask, token_type_ids=None, owner=None, n_texts=None):
        """Logits of shape ``(n_texts, n_outputs)``."""
        rows = self.encode_rows(input_ids, attention_mask, token_type_ids)
        return self.combine(rows, owner, n_texts)

    def encode_rows(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """The encoder's vector per row (chunk), before chunk pooling and the head."""
        return self.encoder.encode_rows(input_ids, attention_mask, token_type_ids)

    def combine(self, rows, owner=None, n_texts=None) -> torch.Tensor:
        """Logits from row vectors: chunks pooled, then dropout and the head."""
        return self.head(self.dropout(self.encoder.combine(rows, owner, n_texts)))


class SiameseNetwork(nn.Module):
    """One :class:`SentenceEncoder` applied to each side of a pair, with a task head.

    Parameters
    ----------
    encoder : SentenceEncoder
    objective : {"cosine", "pair-softmax", "softmax"}
        ``"cosine"``: the output is cos(u, v) (SBERT's STS objective, no head);
        ``"pair-softmax"``: logits of a linear head on (u, v, |u - v|) (SBERT's NLI objective);
        ``"softmax"``: logits of a linear head on u (single texts).
    n_classes : int
        Classes of the softmax objectives.
    head : nn.Linear or None
        An existing head to continue training (``warm_start``); a new one otherwise.
    """

    def __init__(self, encoder: SentenceEncoder, objective: str, n_classes: int = 0, head=None):
        super().__init__()
        self.encoder = encoder
        self.objective = objective
        if objective == "cosine":
            self.head = None
        else:
            width = encoder.output_dim * (3 if objective == "pair-softmax" else 1)
            self.head = head if head is not None else nn.Linear(width, n_classes)

    @property
    def backbone(self):
        return self.encoder.backbone

    def forward(self, first: dict, second: dict | None = None) -> torch.Tensor:
        """Cosine per pair, or logits; ``first`` / ``second`` are encoder keyword dicts."""
        u = self.encoder(**first)
        if self.objective == "softmax":
            return self.head(u)
        v = self.encoder(**second)
        if self.objective == "cosine":
            return torch.nn.functional.cosine_similarity(u.float(), v.float(), dim=-1)
        return self.head(torch.cat([u, v, (u - v).abs()], dim=-1))


class MaskedLMNetwork(nn.Module):
    """A transformers ``*ForMaskedLM`` model with the ``backbone`` the training loop expects.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A masked-LM model; its ``base_model`` (the encoder) is the backbone, its masked-LM
        head counts as head.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    @property
    def backbone(self):
        return self.model.base_model

    def _head(self):
        """The model's masked-LM head when it is one module on the encoder output, else None.

        True of BERT (``cls``), ALBERT (``predictions``), RoBERTa (``lm_head``) and most
        encoders; models whose head is several modules (DistilBERT, ELECTRA) return None.
        """
        base = self.model.base_model
        heads = [
            module
            for module in self.model.children()
            if module is not base and any(True for _ in module.parameters())
        ]
        return heads[0] if len(heads) == 1 else None

    def forward(self, **inputs):
        """The masked-LM loss of a collated batch (``input_ids``, ``labels``, ...).

        The vocabulary projection, the costliest part, is applied to the masked positions only
        (about 15 % of them) when the head is one module; the loss is the same as the model's
        own (mean cross-entropy over the masked tokens).
        """
        head = self._head()
        if head is None:
            return self.model(**inputs).loss
        labels = inputs.pop("labels")
        states = self.model.base_model(**inputs, return_dict=True).last_hidden_state
        masked = labels != -100
        logits = head(states[masked])
        return nn.functional.cross_entropy(logits.float(), labels[masked])
