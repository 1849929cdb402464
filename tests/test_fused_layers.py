"""Prediction's fused BERT layers (skbert._fused_layers) agree with the transformers forward,
apply only where they know the structure, and follow the weights when they change."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel

from skbert import BertSentenceTransformer
from skbert._fused_layers import _PLANS, fused_forward


def _load(path):
    return AutoModel.from_pretrained(path).eval()


def _probe(vocab, rows=3, length=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(5, vocab, (rows, length), generator=generator)


@pytest.mark.parametrize("name", ["tiny_bert", "packaged_model"])
def test_fused_states_match_transformers(request, name):
    backbone = _load(request.getfixturevalue(name))
    ids = _probe(backbone.config.vocab_size)
    types = torch.zeros_like(ids)
    with torch.inference_mode():
        expected = backbone(input_ids=ids, token_type_ids=types, output_hidden_states=True)
        fused = fused_forward(backbone, ids, types, True)
    assert fused is not None, "the fused path should apply to a BERT encoder"
    assert len(fused.hidden_states) == len(expected.hidden_states)
    for want, got in zip(expected.hidden_states, fused.hidden_states, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(fused.last_hidden_state, fused.hidden_states[-1])
    with torch.inference_mode():
        last_only = fused_forward(backbone, ids, types, False)
    assert last_only.hidden_states is None
    assert torch.equal(last_only.last_hidden_state, fused.last_hidden_state)


def test_not_taken_for_albert_training_or_gradients(tiny_albert, tiny_bert):
    albert = _load(tiny_albert)
    ids = _probe(albert.config.vocab_size)
    with torch.inference_mode():
        assert fused_forward(albert, ids, None, False) is None  # shared layers: not BERT's
    bert = _load(tiny_bert)
    with torch.no_grad():
        assert fused_forward(bert, ids, None, False) is not None
    assert fused_forward(bert, ids, None, False) is None  # gradients wanted
    bert.train()
    with torch.inference_mode():
        assert fused_forward(bert, ids, None, False) is None  # dropout active
    bert.eval().to(torch.float64)
    with torch.inference_mode():
        assert fused_forward(bert, ids.clone(), None, False) is None  # float32 only


def test_not_taken_when_the_check_against_transformers_fails(tiny_bert):
    backbone = _load(tiny_bert)
    backbone.config.hidden_act = "gelu"
    for layer in backbone.encoder.layer:  # same structure, other math: must be refused
        layer.intermediate.intermediate_act_fn = torch.nn.ReLU()
    ids = _probe(backbone.config.vocab_size)
    with torch.inference_mode():
        assert fused_forward(backbone, ids, None, False) is None


def test_plan_follows_weight_changes(tiny_bert):
    backbone = _load(tiny_bert)
    ids = _probe(backbone.config.vocab_size)
    with torch.inference_mode():
        before = fused_forward(backbone, ids, None, False).last_hidden_state.clone()
    with torch.no_grad():  # what an optimizer step does: change a weight in place
        backbone.encoder.layer[0].attention.self.key.weight.mul_(3.0)
        backbone.encoder.layer[-1].output.dense.bias.add_(0.5)
    with torch.inference_mode():
        after = fused_forward(backbone, ids, None, False).last_hidden_state
        expected = backbone(input_ids=ids).last_hidden_state
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, expected, rtol=1e-4, atol=1e-4)
    assert backbone in _PLANS


def test_weights_made_in_inference_mode_take_the_transformers_forward(tiny_bert):
    config = _load(tiny_bert).config
    with torch.inference_mode():  # such weights count no versions: changes would go unseen
        backbone = AutoModel.from_config(config).eval()
        ids = _probe(config.vocab_size)
        assert fused_forward(backbone, ids, None, False) is None
        assert backbone(input_ids=ids).last_hidden_state.shape == (3, 7, 16)


def test_transform_vectors_match_the_transformers_forward(packaged_model):
    """The fused path changes speed, not results: vectors within float rounding of those of
    the transformers forward (the fused path turned off)."""
    X = ["a man is playing a guitar .", "the cat sat on the mat", "short", "x " * 40]
    est = BertSentenceTransformer(packaged_model, pooling="mean", device="cpu").fit(["a"])
    fused = est.transform(X)
    backbone = est.network_.backbone
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("skbert._network.fused_forward", lambda *args: None)
        plain = est.transform(X)
    assert backbone in _PLANS and _PLANS[backbone][1] is not None
    np.testing.assert_allclose(fused, plain, rtol=1e-4, atol=2e-6)
