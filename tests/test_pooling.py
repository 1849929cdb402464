import pytest
import torch

from skbert.pooling import ChunkPooling, CLSPooling, MaxPooling, MeanPooling, make_pooling


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
