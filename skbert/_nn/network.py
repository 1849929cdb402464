"""The networks: encoder -> chosen layers -> token pooling -> chunk pooling -> output layer."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from ..pooling import (
    FROZEN_POOLINGS,
    PoolerPooling,
    make_chunk_pooling,
    make_pooling,
    pooler_dense,
)
from .readout import Readout

__all__ = [
    "weights_version",
    "SentenceEncoder",
    "TaskNetwork",
    "SiameseNetwork",
    "MaskedLMNetwork",
]


def _mask_or_ones(attention_mask, states):
    """``attention_mask``, or all ones (int64, like token ids) for a padding-free batch
    (``None``) of token ``states`` ``(batch, seq, ...)``."""
    if attention_mask is not None:
        return attention_mask
    return torch.ones(states.shape[:2], dtype=torch.int64, device=states.device)


def layer_states(outputs) -> tuple:
    """Every hidden state of backbone ``outputs``, the embeddings' first, the last layer's
    being ``last_hidden_state``. transformers 4.48 to 4.5x give ModernBERT's last
    ``hidden_states`` before its final norm and ``last_hidden_state`` after it (transformers 5
    gives the normed state in both): layer -1 is the same state whether it is read alone, with
    other layers or into the feature cache."""
    return (*outputs.hidden_states[:-1], outputs.last_hidden_state)


def weights_version(module) -> tuple | None:
    """Changes whenever a weight of ``module`` is replaced or changed in place (a training
    step, ``load_state_dict``, an in-place operation under ``torch.no_grad()``): each
    parameter's storage and version counter. None for weights made under
    ``torch.inference_mode()``, which count no versions. (Writes through ``.data`` bypass
    the counter, as they bypass autograd: they are not seen.)"""
    try:
        return tuple((p.data_ptr(), p._version) for p in module.parameters())
    except RuntimeError:
        return None


def exported_backbone_state(network: nn.Module) -> dict | None:
    """The state dict that ``network.backbone.save_pretrained`` should write, or None for the
    backbone's own.

    ``pooling="pooler"`` trains a copy of the backbone's pooler (:class:`PoolerPooling`), not
    the pooler itself: the copy's weights replace the pooler's in the state written, so that
    the checkpoint's pooler (transformers' ``pooler_output``, and ``pooling="pooler"`` over
    ``model=`` the folder) is the trained one.
    """
    backbone = network.backbone
    dense = pooler_dense(backbone)
    trained = [m.dense for m in network.modules() if isinstance(m, PoolerPooling)]
    if dense is None or not trained:
        return None
    prefix = next(name for name, module in backbone.named_modules() if module is dense)
    state = backbone.state_dict()
    state.update({f"{prefix}.{k}": v for k, v in trained[0].state_dict().items()})
    return state


class SentenceEncoder(nn.Module):
    """Encode token ids into one vector per text.

    Parameters
    ----------
    backbone : transformers.PreTrainedModel
        An encoder loaded with ``AutoModel``.
    readout : Readout
        The layers read, how they are combined, the token pooling and the chunk pooling; the
        pooling modules are built from it (a CNN or chunk attention with new weights).
    """

    def __init__(self, backbone, readout: Readout):
        super().__init__()
        self.backbone = backbone
        self.readout = readout
        self.pooling = make_pooling(
            readout.pooling,
            readout.token_dim,
            kernel_sizes=readout.cnn_kernel_sizes,
            channels=readout.cnn_channels,
            pooler=pooler_dense(backbone) if readout.pooling == "pooler" else None,
        )
        self.chunk_pooling = make_chunk_pooling(readout.chunk_pooling, readout.output_dim)
        params = inspect.signature(backbone.forward).parameters
        self.uses_token_types = "token_type_ids" in params

    @property
    def output_dim(self) -> int:
        """Width of the output vectors."""
        return self.readout.output_dim

    @property
    def reads_last_layer_only(self) -> bool:
        """Whether the readout reads the last hidden state alone (then the backbone need not
        return every layer's states)."""
        return self.readout.layers == (self.readout.n_hidden_states - 1,)

    def backbone_outputs(
        self, input_ids, attention_mask, token_type_ids=None, all_states=False, drop_full_mask=True
    ):
        """The backbone's transformers forward: ``last_hidden_state`` and, with ``all_states``,
        every layer's ``hidden_states``.

        Parameters
        ----------
        input_ids : torch.Tensor
            ``(batch, seq)`` token ids.
        attention_mask : torch.Tensor or None
            ``(batch, seq)``, 0 at padding; None for a batch without padding.
        token_type_ids : torch.Tensor or None, default=None
            Segment ids; ignored by a backbone that takes none.
        all_states : bool, default=False
            Also return every layer's states (``output_hidden_states=True``).
        drop_full_mask : bool, default=True
            In eval mode, leave out a mask without padding (attention then takes its fast
            path). False passes the mask as it is, with no test of its values: what a graph
            traced for export needs, as it serves padded and unpadded batches alike.
        """
        # A batch without padding needs no mask; without one, attention takes its fast path.
        # Prediction passes None for its padding-free blocks (no device-to-host sync to check).
        full = attention_mask is None or (
            drop_full_mask and not self.training and bool(attention_mask.all())
        )
        kwargs = {"input_ids": input_ids, "attention_mask": None if full else attention_mask}
        if self.uses_token_types and token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return self.backbone(**kwargs, output_hidden_states=all_states, return_dict=True)

    def token_states(self, outputs) -> torch.Tensor:
        """Token states of the chosen layers, combined: ``(batch, seq, token_dim)``.

        ``outputs``: backbone outputs (:meth:`backbone_outputs`, or any object with the same
        ``last_hidden_state`` and ``hidden_states``), with every hidden state unless
        :attr:`reads_last_layer_only`.
        """
        if self.reads_last_layer_only:
            return outputs.last_hidden_state
        every = layer_states(outputs)
        states = [every[i] for i in self.readout.layers]
        if len(states) == 1:
            return states[0]
        if self.readout.layer_combine == "concat":
            return torch.cat(states, dim=-1)
        stacked = torch.stack(states, dim=0)
        return stacked.mean(dim=0) if self.readout.layer_combine == "mean" else stacked.amax(dim=0)

    def all_layer_rows(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """Every weight-free pooling of every hidden state, from one forward pass:
        :meth:`read_all_layer_rows` of :meth:`backbone_outputs` (with every hidden state)."""
        outputs = self.backbone_outputs(input_ids, attention_mask, token_type_ids, True)
        return self.read_all_layer_rows(outputs, attention_mask)

    def read_all_layer_rows(self, outputs, attention_mask=None) -> torch.Tensor:
        """Every weight-free pooling of every hidden state of given backbone outputs.

        Returns ``(n_rows, len(FROZEN_POOLINGS), n_hidden_states, hidden)``;
        :meth:`combine_all_layers` pools the chunks of a text. Feeds the frozen-feature cache.
        ``attention_mask``: as in :meth:`read_rows`.
        """
        every = layer_states(outputs)
        attention_mask = _mask_or_ones(attention_mask, every[0])
        per_pooling = []
        for name in FROZEN_POOLINGS:
            pool = make_pooling(name)
            per_pooling.append(torch.stack([pool(h, attention_mask) for h in every], 1))
        return torch.stack(per_pooling, dim=1)  # (rows, poolings, layers, hidden)

    def combine_all_layers(self, rows, owner=None, n_texts=None) -> torch.Tensor:
        """:meth:`combine` for :meth:`all_layer_rows` output, per pooling and layer."""
        if owner is None:
            return rows
        shape = rows.shape[1:]
        combined = self.chunk_pooling(rows.reshape(len(rows), -1), owner, n_texts)
        return combined.reshape(n_texts, *shape)

    def forward(self, input_ids, attention_mask, token_type_ids=None, owner=None, n_texts=None):
        """Return ``(n_texts, output_dim)``; rows sharing an ``owner`` are chunks of one text."""
        rows = self.encode_rows(input_ids, attention_mask, token_type_ids)
        return self.combine(rows, owner, n_texts)

    def read_rows(self, outputs, attention_mask=None) -> torch.Tensor:
        """One pooled vector per row (chunk) from given backbone outputs: the chosen layers,
        combined (:meth:`token_states`), then the token pooling; ``(n_rows, output_dim)``.

        ``attention_mask``: as given to :meth:`backbone_outputs` (None: no padding).
        """
        states = self.token_states(outputs)
        return self.pooling(states, _mask_or_ones(attention_mask, states))

    def encode_rows(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """One pooled vector per row (chunk): :meth:`read_rows` of :meth:`backbone_outputs`."""
        all_states = not self.reads_last_layer_only
        outputs = self.backbone_outputs(input_ids, attention_mask, token_type_ids, all_states)
        return self.read_rows(outputs, attention_mask)

    def combine(self, rows, owner=None, n_texts=None) -> torch.Tensor:
        """Text vectors from row vectors: the chunks of a text (same ``owner``) pooled."""
        if owner is None:
            return rows
        return self.chunk_pooling(rows, owner, n_texts)


class TaskNetwork(nn.Module):
    """A :class:`SentenceEncoder` with dropout and a linear output layer on its vectors.

    Parameters
    ----------
    encoder : SentenceEncoder
        The encoder with its pooling.
    n_outputs : int
        Logits per input (classes, or labels for multi-label).
    dropout : float
        Dropout rate before the output layer (Sun et al.: 0.1).
    """

    def __init__(self, encoder: SentenceEncoder, n_outputs: int, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.output_layer = nn.Linear(encoder.output_dim, n_outputs)

    @property
    def backbone(self):
        return self.encoder.backbone

    @property
    def output_dim(self) -> int:
        return self.output_layer.out_features

    def forward(self, input_ids, attention_mask, token_type_ids=None, owner=None, n_texts=None):
        """Logits of shape ``(n_texts, n_outputs)``."""
        rows = self.encode_rows(input_ids, attention_mask, token_type_ids)
        return self.combine(rows, owner, n_texts)

    def encode_rows(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """The encoder's vector per row (chunk), before chunk pooling and the output layer."""
        return self.encoder.encode_rows(input_ids, attention_mask, token_type_ids)

    def combine(self, rows, owner=None, n_texts=None) -> torch.Tensor:
        """Logits from row vectors: chunks pooled, then dropout and the output layer."""
        texts = self.dropout(self.encoder.combine(rows, owner, n_texts))
        return self.output_layer(texts)


class SiameseNetwork(nn.Module):
    """One :class:`SentenceEncoder` applied to each side of a pair, with an output layer.

    Parameters
    ----------
    encoder : SentenceEncoder
        The encoder with its pooling, shared by both sides.
    objective : {"cosine", "pair-softmax", "softmax", "contrastive"}
        ``"cosine"``: the output is cos(u, v) (SBERT's STS objective, no output layer);
        ``"pair-softmax"``: logits of a linear layer on (u, v, |u - v|) (SBERT's NLI
        objective); ``"softmax"``: logits of a linear layer on u (single texts);
        ``"contrastive"``: the vectors u of single texts (no output layer: the loss compares
        the vectors of a batch).
    n_classes : int
        Classes of the softmax objectives.
    output_layer : nn.Linear or None
        An existing output layer to continue training (``warm_start``); a new one otherwise.
    """

    def __init__(
        self, encoder: SentenceEncoder, objective: str, n_classes: int = 0, output_layer=None
    ):
        super().__init__()
        self.encoder = encoder
        self.objective = objective
        if objective in ("cosine", "contrastive"):
            self.output_layer = None
        elif output_layer is not None:
            self.output_layer = output_layer
        else:
            width = encoder.output_dim * (3 if objective == "pair-softmax" else 1)
            self.output_layer = nn.Linear(width, n_classes)

    @property
    def backbone(self):
        return self.encoder.backbone

    def forward(self, first: dict, second: dict | None = None) -> torch.Tensor:
        """Cosine per pair, logits, or vectors; ``first`` / ``second`` are encoder keyword
        dicts."""
        u = self.encoder(**first)
        if self.objective == "contrastive":
            return u
        if self.objective == "softmax":
            return self.output_layer(u)
        v = self.encoder(**second)
        if self.objective == "cosine":
            return torch.nn.functional.cosine_similarity(u.float(), v.float(), dim=-1)
        return self.output_layer(torch.cat([u, v, (u - v).abs()], dim=-1))


class MaskedLMNetwork(nn.Module):
    """A transformers ``*ForMaskedLM`` model with the ``backbone`` the training loop expects.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A masked-LM model; its ``base_model`` (the encoder) is the backbone, its masked-LM
        head is what the training loop puts on top of it.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    @property
    def backbone(self):
        return self.model.base_model

    def single_head(self):
        """The model's masked-LM head when it is one module on the encoder output, else None.

        True of BERT (``cls``), ALBERT (``predictions``), RoBERTa (``lm_head``) and most
        encoders; models whose head is several modules (DistilBERT, ELECTRA) or whose head
        reads more than the states (DeBERTa-v2 with ``legacy=False``: the word embeddings
        too) return None.
        """
        base = self.model.base_model
        heads = [
            module
            for module in self.model.children()
            if module is not base and any(True for _ in module.parameters())
        ]
        return heads[0] if len(heads) == 1 and _reads_one_input(heads[0]) else None

    def forward(self, **inputs):
        """The masked-LM loss of a collated batch (``input_ids``, ``labels``, ...).

        The vocabulary projection, the costliest part, is applied to the masked positions only
        (about 15 % of them) when the head is one module; the loss is the same as the model's
        own (mean cross-entropy over the masked tokens).
        """
        head = self.single_head()
        if head is None:
            return self.model(**inputs).loss
        labels = inputs.pop("labels")
        states = self.model.base_model(**inputs, return_dict=True).last_hidden_state
        masked = labels != -100
        logits = head(states[masked])
        return nn.functional.cross_entropy(logits.float(), labels[masked])


def _reads_one_input(module: nn.Module) -> bool:
    """Whether ``module(states)`` is a whole call: one required positional argument."""
    required = [
        parameter
        for parameter in inspect.signature(module.forward).parameters.values()
        if parameter.default is parameter.empty
        and parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]
    return len(required) == 1
