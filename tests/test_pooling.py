import subprocess
import sys

import numpy as np
import pytest
import torch

from skbert.pooling import (
    AttentionChunkPooling,
    ChunkPooling,
    CLSPooling,
    CNNPooling,
    MaxPooling,
    MeanPooling,
    make_pooling,
)


@pytest.fixture
def padded():
    """Two sequences of lengths 3 and 1, padded to 4 with huge values that must not leak."""
    torch.manual_seed(0)
    states = torch.randn(2, 4, 5)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    states = states.masked_fill(~mask.bool().unsqueeze(-1), 1e6)
    return states, mask


def test_mean_ignores_padding(padded):
    states, mask = padded
    out = MeanPooling()(states, mask)
    torch.testing.assert_close(out[0], states[0, :3].mean(0))
    torch.testing.assert_close(out[1], states[1, 0])


def test_max_ignores_padding(padded):
    states, mask = padded
    out = MaxPooling()(states, mask)
    torch.testing.assert_close(out[0], states[0, :3].amax(0))
    torch.testing.assert_close(out[1], states[1, 0])


def test_cls_is_first_token(padded):
    states, mask = padded
    torch.testing.assert_close(CLSPooling()(states, mask), states[:, 0])


def test_poolings_do_not_modify_input(padded):
    states, mask = padded
    before = states.clone()
    for module in (MeanPooling(), MaxPooling(), CLSPooling()):
        module(states, mask)
    torch.testing.assert_close(states, before)


def test_chunk_pooling_mean_and_max():
    vectors = torch.tensor([[1.0, 4.0], [3.0, 0.0], [5.0, 5.0]])
    owner = torch.tensor([0, 0, 1])
    torch.testing.assert_close(
        ChunkPooling("mean")(vectors, owner, 2), torch.tensor([[2.0, 2.0], [5.0, 5.0]])
    )
    torch.testing.assert_close(
        ChunkPooling("max")(vectors, owner, 2), torch.tensor([[3.0, 4.0], [5.0, 5.0]])
    )


def test_chunk_pooling_handles_negative_values_with_max():
    vectors = torch.tensor([[-3.0], [-1.0]])
    out = ChunkPooling("max")(vectors, torch.tensor([0, 0]), 1)
    torch.testing.assert_close(out, torch.tensor([[-1.0]]))


def test_make_pooling_refuses_unknown_names():
    with pytest.raises(ValueError, match="pooling='sum' is not allowed"):
        make_pooling("sum")
    with pytest.raises(ValueError, match="mode='attention'"):
        ChunkPooling("attention")


# --- CNNPooling ---------------------------------------------------------------------------


def _cnn(input_dim=5, kernel_sizes=(1, 2, 3, 5), channels=4, seed=0):
    torch.manual_seed(seed)
    return CNNPooling(input_dim, kernel_sizes=kernel_sizes, channels=channels)


@pytest.mark.parametrize("kernel_sizes, channels", [((1, 3, 5), 4), ((2,), 7), ((2, 4), 3)])
def test_cnn_output_width_is_channels_times_kernels(kernel_sizes, channels):
    cnn = _cnn(kernel_sizes=kernel_sizes, channels=channels)
    out = cnn(torch.randn(3, 6, 5), torch.ones(3, 6, dtype=torch.long))
    assert cnn.output_dim == channels * len(kernel_sizes)
    assert out.shape == (3, channels * len(kernel_sizes))


def test_cnn_padded_row_equals_unpadded_row():
    cnn = _cnn()
    torch.manual_seed(1)
    rows = [torch.randn(n, 5) for n in (4, 1, 7, 2)]  # lengths, even and odd
    alone = [cnn(r.unsqueeze(0), torch.ones(1, len(r), dtype=torch.long))[0] for r in rows]
    width = 9
    states = torch.full((len(rows), width, 5), 1e6)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        states[i, : len(r)] = r
        mask[i, : len(r)] = 1
    batched = cnn(states, mask)
    for i, expected in enumerate(alone):
        torch.testing.assert_close(batched[i], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fill", [0.0, 1e6, -1e6, float("inf"), float("nan"), "random"])
def test_cnn_padding_values_never_change_the_output(fill):
    cnn = _cnn()
    torch.manual_seed(2)
    states = torch.randn(2, 6, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    reference = cnn(states, mask)
    pad = ~mask.bool().unsqueeze(-1)
    other = torch.randn_like(states) * 100 if fill == "random" else torch.full_like(states, fill)
    out = cnn(torch.where(pad, other, states), mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, reference, rtol=0, atol=0)


def test_cnn_gradients_flow_to_weights_and_real_tokens_only():
    cnn = _cnn()
    torch.manual_seed(3)
    states = torch.randn(2, 6, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    cnn(states, mask).sum().backward()
    for conv in cnn.convs:
        assert conv.weight.grad is not None and conv.weight.grad.abs().sum() > 0
        assert conv.bias.grad is not None and torch.isfinite(conv.bias.grad).all()
    assert states.grad[0, :3].abs().sum() > 0 and states.grad[1].abs().sum() > 0
    assert (states.grad[0, 3:] == 0).all()  # padding gets no gradient


# torch warns once per process, from C++, so the check runs in a fresh interpreter of its own
_EVEN_WIDTHS = """
import warnings
import torch
from skbert.pooling import CNNPooling
torch.manual_seed(0)
cnn = CNNPooling(5, kernel_sizes=(1, 2, 3, 4), channels=3)
states = torch.randn(2, 6, 5, requires_grad=True)
mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
with warnings.catch_warnings(record=True) as ours:
    warnings.simplefilter("always")
    out = cnn(states, mask)
    grads = torch.autograd.grad(out.square().sum(), [states, *cnn.parameters()])
# the same sum as the module's, with torch's own padding="same" for every width
keep = mask.unsqueeze(1).bool()
x = states.transpose(1, 2).masked_fill(~keep, 0.0)
with warnings.catch_warnings(record=True) as torchs:
    warnings.simplefilter("always")
    parts = [torch.relu(conv(x)) for conv in cnn.convs]
expected = torch.cat(
    [h.masked_fill(~keep, torch.finfo(h.dtype).min).amax(dim=-1) for h in parts], dim=-1
)
expected_grads = torch.autograd.grad(expected.square().sum(), [states, *cnn.parameters()])
print(len(ours), len(torchs) > 0, torch.equal(out, expected))
print(all(torch.equal(a, b) for a, b in zip(grads, expected_grads)))
"""


def test_cnn_even_widths_warn_nothing_and_keep_torchs_bits():
    """An even width pads one zero more on the right, as torch's padding="same" does, with the
    same bits forward and backward, but without torch's warning that it copies the input."""
    result = subprocess.run(
        [sys.executable, "-c", _EVEN_WIDTHS], capture_output=True, text=True, check=True
    )
    # no warning from the module; torch's own "same" warns (so the check is not vacuous)
    assert result.stdout.split() == ["0", "True", "True", "True"], result.stdout + result.stderr


def test_cnn_does_not_modify_input(padded):
    states, mask = padded
    before = states.clone()
    _cnn()(states, mask)
    torch.testing.assert_close(states, before)


# --- ChunkPooling -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["mean", "max"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chunk_pooling_matches_numpy(mode, seed):
    rng = np.random.default_rng(seed)
    n_texts = 4
    # every text has 1-4 chunks; rows in the order of their texts, as the encoder makes them
    owner = np.repeat(np.arange(n_texts), rng.integers(1, 5, size=n_texts))
    vectors = rng.normal(size=(len(owner), 6)).astype(np.float32) - 1.0  # mostly negative
    expected = np.stack([getattr(np, mode)(vectors[owner == t], axis=0) for t in range(n_texts)])
    out = ChunkPooling(mode)(torch.from_numpy(vectors), torch.from_numpy(owner), n_texts)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["mean", "max"])
def test_chunk_pooling_unsorted_owner_matches_numpy(mode):
    rng = np.random.default_rng(5)
    owner = np.array([2, 0, 1, 0, 2, 2, 1])
    vectors = rng.normal(size=(len(owner), 3)).astype(np.float32)
    expected = np.stack([getattr(np, mode)(vectors[owner == t], axis=0) for t in range(3)])
    out = ChunkPooling(mode)(torch.from_numpy(vectors), torch.from_numpy(owner), 3)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["mean", "max"])
def test_chunk_pooling_one_chunk_per_text_is_identity(mode):
    vectors = torch.randn(3, 4)
    out = ChunkPooling(mode)(vectors, torch.arange(3), 3)
    torch.testing.assert_close(out, vectors)


# --- AttentionChunkPooling ----------------------------------------------------------------


def _attention(dim=6, seed=0):
    torch.manual_seed(seed)
    return AttentionChunkPooling(dim)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_identical_chunks_return_that_chunk(seed):
    att = _attention(seed=seed)
    v, w = torch.randn(6), torch.randn(6)
    vectors = torch.stack([v, v, v, w, w])
    out = att(vectors, torch.tensor([0, 0, 0, 1, 1]), 2)  # weights sum to 1 per text
    torch.testing.assert_close(out, torch.stack([v, w]), rtol=1e-5, atol=1e-6)


def test_attention_single_chunk_text_returns_its_vector():
    att = _attention()
    vectors = torch.randn(5, 6)
    owner = torch.tensor([0, 1, 1, 1, 2])
    out = att(vectors, owner, 3)
    torch.testing.assert_close(out[0], vectors[0])
    torch.testing.assert_close(out[2], vectors[4])
    torch.testing.assert_close(att(vectors[:1], torch.tensor([0]), 1), vectors[:1])


def test_attention_output_is_a_convex_combination():
    att = _attention()
    with torch.no_grad():
        att.score.weight.mul_(1e4)  # huge scores: the softmax must stay finite
    vectors = torch.randn(7, 6)
    owner = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    out = att(vectors, owner, 2)
    assert torch.isfinite(out).all()
    for t in range(2):
        mine = vectors[owner == t]
        assert (out[t] >= mine.min(0).values - 1e-5).all()
        assert (out[t] <= mine.max(0).values + 1e-5).all()


def test_attention_with_equal_scores_is_the_mean():
    att = _attention()
    with torch.no_grad():
        att.score.weight.zero_()
    vectors = torch.randn(6, 6)
    owner = torch.tensor([0, 0, 1, 1, 1, 2])
    expected = ChunkPooling("mean")(vectors, owner, 3)
    torch.testing.assert_close(att(vectors, owner, 3), expected)


def test_attention_texts_do_not_leak_into_each_other():
    att = _attention()
    torch.manual_seed(4)
    a, b = torch.randn(3, 6), torch.randn(2, 6) * 10
    together = att(torch.cat([a, b]), torch.tensor([0, 0, 0, 1, 1]), 2)
    torch.testing.assert_close(together[0], att(a, torch.zeros(3, dtype=torch.long), 1)[0])
    torch.testing.assert_close(together[1], att(b, torch.zeros(2, dtype=torch.long), 1)[0])


def test_attention_output_independent_of_text_and_chunk_order():
    att = _attention()
    torch.manual_seed(5)
    vectors = torch.randn(8, 6)
    owner = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3])
    reference = att(vectors, owner, 4)
    rows = torch.randperm(8)  # shuffle the rows...
    relabel = torch.tensor([2, 3, 0, 1])  # ...and renumber the texts
    out = att(vectors[rows], relabel[owner[rows]], 4)
    torch.testing.assert_close(out[relabel], reference, rtol=1e-5, atol=1e-6)


def test_attention_gradients_flow():
    att = _attention()
    vectors = torch.randn(5, 6, requires_grad=True)
    att(vectors, torch.tensor([0, 0, 0, 1, 1]), 2).pow(2).sum().backward()
    assert att.project.weight.grad.abs().sum() > 0
    assert att.score.weight.grad.abs().sum() > 0
    assert vectors.grad.abs().sum() > 0


@pytest.mark.parametrize("training", [False, True])
def test_attention_forward_weighs_the_chunk_scores(training):
    """forward = weigh(chunk_scores): the row-wise score, then the weighting per text, in
    training and eval mode alike; a chunk's score is its own row's alone."""
    att = _attention().train(training)
    torch.manual_seed(6)
    vectors = torch.randn(9, 6)
    owner = torch.tensor([2, 0, 0, 1, 2, 2, 3, 1, 0])
    scores = att.chunk_scores(vectors)
    assert scores.shape == (9, 1)
    assert torch.equal(att(vectors, owner, 4), att.weigh(vectors, scores, owner, 4))
    torch.testing.assert_close(att.chunk_scores(vectors[3:4]), scores[3:4])


def test_factories_name_what_is_missing_or_not_allowed():
    from skbert.pooling import make_chunk_pooling, make_pooling

    with pytest.raises(ValueError, match="chunk_pooling='bogus' .* 'mean', 'max' or 'attention'"):
        make_chunk_pooling("bogus")
    with pytest.raises(ValueError, match="chunk_pooling='attention' needs dim"):
        make_chunk_pooling("attention")
    with pytest.raises(ValueError, match="pooling='cnn' needs input_dim"):
        make_pooling("cnn")


def test_chunk_pooling_follows_owner_whatever_its_order():
    """With as many chunks as texts the input came back as it was, owner unread."""
    from skbert.pooling import ChunkPooling

    vectors = torch.tensor([[1.0, 1.0], [5.0, 5.0]])
    for mode in ("mean", "max"):
        pool = ChunkPooling(mode)
        swapped = pool(vectors, torch.tensor([1, 0]), 2)
        assert torch.equal(swapped, torch.tensor([[5.0, 5.0], [1.0, 1.0]]))
        together = pool(vectors, torch.tensor([0, 0]), 2)
        expected = [3.0, 3.0] if mode == "mean" else [5.0, 5.0]
        assert torch.equal(together[0], torch.tensor(expected))
        assert pool(vectors, torch.tensor([0, 1]), 2) is vectors  # in order: as it is
