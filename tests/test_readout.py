"""The read-out parameters resolved once per fit (skbert._estimator.readout.resolve_readout):
what each parameter becomes against a model's configuration, and the values it refuses."""

from types import SimpleNamespace

import pytest

from skbert import BertSentenceTransformer, BertTextClassifier
from skbert._estimator.readout import resolve_readout
from skbert._nn.backbone import SpecialTokens
from skbert._nn.readout import Readout

#: a 4-layer encoder of width 16, whose tokenizer adds [CLS] and [SEP]
CONFIG = SimpleNamespace(num_hidden_layers=4, hidden_size=16)
SPECIALS = SpecialTokens(
    single=((2,), (3,)), pair=((2,), (3,), (3,)), single_types=(0, 0, 0), pair_types=(0,) * 5
)
LIMIT = 64


def resolved(cls=BertSentenceTransformer, **params) -> Readout:
    return resolve_readout({**cls(**params).get_params(deep=False)}, CONFIG, SPECIALS, LIMIT)


def test_the_defaults_resolve_against_the_model():
    readout = resolved()
    assert readout.max_length == LIMIT  # max_length=None: the model's limit
    assert readout.layers == (4,)  # layer=-1: the last of the 4 layers
    assert readout.n_hidden_states == 5 and readout.hidden_size == 16
    assert readout.truncation == "head" and readout.pooling == "mean"
    assert readout.cnn_kernel_sizes == (1, 3, 5) and readout.cnn_channels == 128
    assert readout.untrained_weights == [] and readout.output_dim == 16


def test_every_read_out_parameter_is_carried_over():
    readout = resolved(
        BertTextClassifier,
        truncation="chunks",
        max_length=32,
        max_chunks=3,
        chunk_pooling="attention",
        layer=(-2, 0),
        layer_combine="concat",
        pooling="cnn",
        cnn_kernel_sizes=[2, 4],
        cnn_channels=8,
    )
    assert readout == Readout(
        truncation="chunks",
        max_length=32,
        head_length=readout.head_length,
        max_chunks=3,
        chunk_pooling="attention",
        layers=(3, 0),  # in the order given, made non-negative
        layer_combine="concat",
        pooling="cnn",
        hidden_size=16,
        n_hidden_states=5,
        cnn_kernel_sizes=(2, 4),
        cnn_channels=8,
    )
    assert readout.token_dim == 32 and readout.output_dim == 16
    assert readout.untrained_weights == ["pooling='cnn'", "chunk_pooling='attention'"]


def test_max_length_above_the_model_limit_is_refused():
    assert resolved(max_length=LIMIT).max_length == LIMIT
    with pytest.raises(ValueError, match="max_length=65 exceeds this model's limit of 64 tokens"):
        resolved(max_length=LIMIT + 1)


def test_head_plus_tail_needs_room_for_the_tail():
    # 16 tokens, 2 of them special: the head may keep at most 13 of the 14 left
    assert resolved(truncation="head+tail", max_length=16, head_length=13).head_length == 13
    with pytest.raises(ValueError, match="head_length=14 leaves no room for the tail"):
        resolved(truncation="head+tail", max_length=16, head_length=14)
    assert resolved(truncation="head", max_length=16, head_length=14).head_length == 14


@pytest.mark.parametrize("truncation", ["head", "chunks"])
def test_max_length_must_leave_room_for_text(truncation):
    # a tokenizer adding 3 special tokens (<s> a </s> </s>) at max_length=3 read every text as
    # its special tokens alone (one vector for all), and chunks failed naming budget=0
    three = SpecialTokens(
        single=((0,), (2, 2)), pair=((0,), (2, 2), (2,)), single_types=(0,) * 3, pair_types=(0,) * 5
    )
    params = BertSentenceTransformer(max_length=3, truncation=truncation).get_params(deep=False)
    with pytest.raises(ValueError, match=r"max_length=3 leaves no room .* 3 special .* >= 4"):
        resolve_readout(params, CONFIG, three, LIMIT)
    assert resolve_readout({**params, "max_length": 4}, CONFIG, three, LIMIT).max_length == 4


@pytest.mark.parametrize("layer", [5, -6, ()])
def test_layers_out_of_range_are_refused(layer):
    with pytest.raises(ValueError, match="layer="):
        resolved(layer=layer)


def test_bad_kernel_sizes_are_refused():
    with pytest.raises(ValueError, match="cnn_kernel_sizes"):
        resolved(BertTextClassifier, pooling="cnn", cnn_kernel_sizes=(0, 3))
