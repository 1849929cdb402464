"""The networks' seams (skbert._nn.network): the backbone forward, reading rows from given
backbone outputs, and the plain forward they compose, in training and eval mode alike."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from skbert import BertSentenceTransformer
from skbert._core.names import FROZEN_POOLINGS
from skbert._nn.network import SentenceEncoder, TaskNetwork

#: read-outs over the tiny models' 3 hidden states: the last alone, several layers combined,
#: and a pooling with weights
READOUTS = [
    {"layers": (2,), "pooling": "mean"},
    {"layers": (0, 2), "layer_combine": "concat", "pooling": "max"},
    {"layers": (1, 2), "layer_combine": "mean", "pooling": "cls"},
    {"layers": (1, 2), "layer_combine": "max", "pooling": "mean"},
    {"layers": (1,), "pooling": "cnn", "cnn_kernel_sizes": (1, 3), "cnn_channels": 4},
]


def _encoder(path, seed=0, **readout) -> SentenceEncoder:
    """A SentenceEncoder on the checkpoint at ``path`` with a read-out changed by ``readout``
    (new pooling weights drawn from ``seed``)."""
    fitted = BertSentenceTransformer(path, device="cpu").fit(["a"])
    torch.manual_seed(seed)
    readout = dataclasses.replace(fitted.readout_, **readout)
    return SentenceEncoder(fitted.network_.backbone, readout)


def _batch(vocab, rows, length, seed=0, padded=True):
    """Random ``(input_ids, attention_mask, token_type_ids)``; with ``padded``, rows of
    random lengths (at least 1) padded at the end."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (rows, length), generator=generator)
    mask = torch.ones_like(ids)
    if padded:
        lengths = torch.randint(1, length + 1, (rows,), generator=generator)
        mask = (torch.arange(length) < lengths[:, None]).long()
        ids = ids * mask
    return ids, mask, torch.zeros_like(ids)


@pytest.mark.parametrize("readout", READOUTS, ids=lambda r: f"{r['layers']}-{r['pooling']}")
@pytest.mark.parametrize("training", [False, True])
def test_encode_rows_is_read_rows_of_backbone_outputs(tiny_model, readout, training):
    encoder = _encoder(tiny_model, **readout).train(training)
    vocab = encoder.backbone.config.vocab_size
    for rows, length, padded in [(1, 5, False), (4, 9, True), (7, 12, True), (3, 6, False)]:
        ids, mask, types = _batch(vocab, rows, length, seed=rows, padded=padded)
        all_states = not encoder.reads_last_layer_only
        with torch.random.fork_rng(), torch.no_grad():  # the same dropout draws on both sides
            torch.manual_seed(1)
            rows_out = encoder.encode_rows(ids, mask, types)
            torch.manual_seed(1)
            outputs = encoder.backbone_outputs(ids, mask, types, all_states)
            read = encoder.read_rows(outputs, mask)
        assert rows_out.shape == (rows, encoder.output_dim)
        assert torch.equal(rows_out, read)


def test_reads_last_layer_only_and_the_states_it_asks_for(tiny_bert):
    last = _encoder(tiny_bert, layers=(2,))
    several = _encoder(tiny_bert, layers=(1, 2), layer_combine="concat")
    assert last.reads_last_layer_only and not several.reads_last_layer_only
    ids, mask, types = _batch(last.backbone.config.vocab_size, 3, 7)
    with torch.no_grad():
        outputs = last.backbone_outputs(ids, mask, types)
        assert outputs.hidden_states is None
        every = several.backbone_outputs(ids, mask, types, all_states=True)
        assert len(every.hidden_states) == 3
        assert torch.equal(last.token_states(outputs), outputs.last_hidden_state)
        expected = torch.cat([every.hidden_states[1], every.hidden_states[2]], dim=-1)
        assert torch.equal(several.token_states(every), expected)


def test_the_last_layer_is_last_hidden_state_alone_with_others_and_for_the_cache(tiny_bert):
    """transformers 4.48 to 4.5x give ModernBERT's last hidden_states before its final norm and
    last_hidden_state after it: layer -1 read with other layers, or into the feature cache,
    was the pre-norm state (0.10 apart from the plain read of layer -1 on a tiny ModernBERT
    under transformers 4.51.3). Outputs of that form here: the last layer is always
    last_hidden_state."""
    last = _encoder(tiny_bert, layers=(2,), pooling="mean")
    several = _encoder(tiny_bert, layers=(1, 2), layer_combine="concat", pooling="mean")
    ids, mask, types = _batch(several.backbone.config.vocab_size, 3, 7)
    with torch.no_grad():
        every = several.backbone_outputs(ids, mask, types, all_states=True)
        pre_norm = SimpleNamespace(
            last_hidden_state=every.last_hidden_state,
            hidden_states=(*every.hidden_states[:-1], every.hidden_states[-1] * 3 + 1),
        )
        expected = torch.cat([every.hidden_states[1], every.last_hidden_state], dim=-1)
        assert torch.equal(several.token_states(pre_norm), expected)
        assert torch.equal(
            several.read_all_layer_rows(pre_norm, mask), several.read_all_layer_rows(every, mask)
        )
        # the cache's last-layer mean row is the plain read of layer -1
        rows = several.read_all_layer_rows(pre_norm, mask)
        mean = FROZEN_POOLINGS.index("mean")
        assert torch.equal(rows[:, mean, -1], last.read_rows(pre_norm, mask))


@pytest.mark.parametrize("pooling", ["cls", "mean", "max", "cnn"])
def test_no_mask_reads_as_a_mask_of_ones(tiny_bert, pooling):
    encoder = _encoder(tiny_bert, layers=(2,), pooling=pooling, cnn_channels=4).eval()
    ids, mask, types = _batch(encoder.backbone.config.vocab_size, 5, 8, padded=False)
    with torch.no_grad():
        outputs = encoder.backbone_outputs(ids, None, types)
        assert torch.equal(encoder.read_rows(outputs), encoder.read_rows(outputs, mask))
        assert torch.equal(encoder.encode_rows(ids, None, types), encoder.read_rows(outputs))


def test_all_layer_rows_are_read_from_every_hidden_state(tiny_model):
    encoder = _encoder(tiny_model).eval()
    ids, mask, types = _batch(encoder.backbone.config.vocab_size, 6, 10)
    with torch.no_grad():
        rows = encoder.all_layer_rows(ids, mask, types)
        outputs = encoder.backbone_outputs(ids, mask, types, all_states=True)
        assert torch.equal(rows, encoder.read_all_layer_rows(outputs, mask))
        hidden = encoder.backbone.config.hidden_size
        assert rows.shape == (6, 3, 3, hidden)  # (rows, poolings, hidden states, hidden)
        # the last state's mean pooling is what a mean read-out of the last layer reads
        mean = _encoder(tiny_model, layers=(2,), pooling="mean").eval()
        assert torch.equal(rows[:, 1, 2], mean.read_rows(outputs, mask))


@pytest.mark.parametrize("training", [False, True])
def test_forward_is_combine_of_encode_rows(tiny_bert, training):
    encoder = _encoder(tiny_bert, truncation="chunks", chunk_pooling="attention")
    network = TaskNetwork(encoder, n_outputs=3, dropout=0.2).train(training)
    ids, mask, types = _batch(encoder.backbone.config.vocab_size, 7, 9)
    owner = torch.tensor([0, 0, 1, 2, 2, 2, 3])
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(2)
        logits = network(ids, mask, types, owner, 4)
        torch.manual_seed(2)
        rows = network.encode_rows(ids, mask, types)
        texts = network.dropout(encoder.chunk_pooling(rows, owner, 4))
        expected = network.output_layer(texts)
    assert logits.shape == (4, 3)
    assert torch.equal(logits, expected)
