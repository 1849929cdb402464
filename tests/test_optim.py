"""Layer-wise learning-rate decay: the rates of the parameter groups, without training."""

import pytest
import torch
from torch import nn

from skbert import layerwise_param_groups
from skbert._nn.backbone import load_backbone
from skbert.optim import parameter_depths


class Wrapper(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.config.hidden_size, 3)


def rates_by_name(groups):
    return {(g["name"], g["weight_decay"] > 0): g["lr"] for g in groups}


def test_bert_layers_get_decayed_rates(tiny_bert):
    _, backbone = load_backbone(tiny_bert)
    groups = layerwise_param_groups(
        Wrapper(backbone), learning_rate=1e-3, layer_lr_decay=0.5, top_learning_rate=0.1
    )
    rates = rates_by_name(groups)
    assert rates[("embeddings", True)] == pytest.approx(1e-3 * 0.25)
    assert rates[("layer 1", True)] == pytest.approx(1e-3 * 0.5)
    assert rates[("layer 2", True)] == pytest.approx(1e-3)
    assert rates[("top", True)] == pytest.approx(0.1)
    assert [g["name"] for g in groups][0] == "embeddings"


def test_every_parameter_is_in_exactly_one_group(tiny_model):
    _, backbone = load_backbone(tiny_model)
    network = Wrapper(backbone)
    groups = layerwise_param_groups(network, learning_rate=1e-3, layer_lr_decay=0.9)
    grouped = [id(p) for g in groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in network.parameters())


def test_no_weight_decay_on_biases_and_layernorm(tiny_bert):
    _, backbone = load_backbone(tiny_bert)
    groups = layerwise_param_groups(Wrapper(backbone), learning_rate=1e-3, weight_decay=0.1)
    for group in groups:
        dims = {p.ndim for p in group["params"]}
        assert (group["weight_decay"] == 0.0) == (dims == {1})
    names = {n for n, p in backbone.named_parameters() if p.ndim == 1}
    assert any("LayerNorm" in n for n in names)


def test_bert_depths_follow_layer_numbers(tiny_bert):
    _, backbone = load_backbone(tiny_bert)
    depths = parameter_depths(backbone)
    assert depths["embeddings.word_embeddings.weight"] == 0
    assert depths["encoder.layer.0.attention.self.query.weight"] == 1
    assert depths["encoder.layer.1.output.dense.weight"] == 2
    assert depths["pooler.dense.weight"] == 2


def test_albert_shared_layer_gets_top_rate_and_embeddings_decay(tiny_albert):
    _, backbone = load_backbone(tiny_albert)
    depths = parameter_depths(backbone)
    assert depths["embeddings.word_embeddings.weight"] == 0
    assert depths["encoder.embedding_hidden_mapping_in.weight"] == 0
    shared = [n for n in depths if "albert_layer_groups" in n]
    assert shared and all(depths[n] == 2 for n in shared)
    rates = rates_by_name(
        layerwise_param_groups(Wrapper(backbone), learning_rate=1.0, layer_lr_decay=0.5)
    )
    assert rates[("embeddings", True)] == pytest.approx(0.25)
    assert rates[("layer 2", True)] == pytest.approx(1.0)


@pytest.mark.parametrize("n_layers, n_groups", [(5, 2), (6, 4), (7, 3), (4, 4), (6, 1)])
def test_albert_groups_take_the_top_layer_they_run(n_layers, n_groups):
    # (g + 1) * L // G put group 0 of 5 layers in 2 at depth 2; it runs layers 1 to 3
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(
        vocab_size=31, hidden_size=16, num_hidden_layers=n_layers, num_hidden_groups=n_groups,
        num_attention_heads=2, intermediate_size=32, embedding_size=8,
    )  # fmt: skip
    depths = parameter_depths(AlbertModel(config))
    runs = {}  # transformers' AlbertTransformer: layer i runs group int(i / (L / G))
    for i in range(n_layers):
        runs.setdefault(int(i / (n_layers / n_groups)), []).append(i + 1)
    for group, layers in runs.items():
        name = f"encoder.albert_layer_groups.{group}.albert_layers.0.ffn.weight"
        assert depths[name] == max(layers)


def test_shared_relative_position_tables_count_as_the_top_layer(tiny_deberta, tiny_mpnet):
    # DeBERTa's rel_embeddings were at depth 0 (they name "embed") and their norm at the top
    deberta = parameter_depths(load_backbone(tiny_deberta)[1])
    assert deberta["encoder.rel_embeddings.weight"] == deberta["encoder.LayerNorm.weight"] == 2
    assert deberta["embeddings.word_embeddings.weight"] == 0
    mpnet = parameter_depths(load_backbone(tiny_mpnet)[1])
    assert mpnet["encoder.relative_attention_bias.weight"] == 2


class _Config:
    num_hidden_layers = 3


class Opaque(nn.Module):
    """An encoder whose parameter names number no layer."""

    config = _Config()

    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(5, 4)
        self.mixer = nn.Linear(4, 4)


def test_unnumbered_encoder_warns_instead_of_ignoring():
    with pytest.warns(UserWarning, match="embeddings only"):
        depths = parameter_depths(Opaque())
    assert depths == {"embed_tokens.weight": 0, "mixer.weight": 3, "mixer.bias": 3}


def test_unnumbered_encoder_warns_in_the_groups_only_where_decay_is_asked():
    """layerwise_param_groups warned that the decay reaches the embeddings only at the default
    layer_lr_decay=1.0, where no decay was asked for."""
    import warnings

    class Network(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = Opaque()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layerwise_param_groups(Network(), learning_rate=1e-4)
    with pytest.warns(UserWarning, match="embeddings only"):
        layerwise_param_groups(Network(), learning_rate=1e-4, layer_lr_decay=0.9)


def test_a_numbered_layers_own_embedding_table_is_that_layers():
    """transformers 4's BERT with position_embedding_type='relative_key' has a
    distance_embedding in each layer: it named 'embed', so it was put at depth 0 and trained
    at the embeddings' rate instead of its layer's."""

    class Config:
        num_hidden_layers = 2

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.distance_embedding = nn.Embedding(7, 4)
            self.query = nn.Linear(4, 4)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.ModuleList([Layer(), Layer()])

    class Relative(nn.Module):
        config = Config()

        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(5, 4)
            self.encoder = Encoder()

    depths = parameter_depths(Relative())
    assert depths["encoder.layer.0.attention.distance_embedding.weight"] == 1
    assert depths["encoder.layer.1.attention.distance_embedding.weight"] == 2
    assert depths["word_embeddings.weight"] == 0


def test_top_only_leaves_the_encoder_out(tiny_bert):
    _, backbone = load_backbone(tiny_bert)
    network = Wrapper(backbone)
    groups = layerwise_param_groups(network, learning_rate=1e-3, train_backbone=False)
    assert {g["name"] for g in groups} == {"top"}
    assert sum(p.numel() for g in groups for p in g["params"]) == sum(
        p.numel() for p in network.head.parameters()
    )
    assert isinstance(groups[0]["params"][0], torch.nn.Parameter)


def test_old_keyword_head_learning_rate_warns_and_works(tiny_bert):
    _, backbone = load_backbone(tiny_bert)
    network = Wrapper(backbone)
    with pytest.warns(FutureWarning, match="top_learning_rate"):
        old = layerwise_param_groups(network, learning_rate=1e-3, head_learning_rate=0.2)
    new = layerwise_param_groups(network, learning_rate=1e-3, top_learning_rate=0.2)
    assert rates_by_name(old) == rates_by_name(new)
    assert rates_by_name(new)[("top", True)] == pytest.approx(0.2)


def test_rates_out_of_range_are_refused(tiny_bert):
    """layer_lr_decay=-0.5 gave layer 1 a rate of -5e-4, which AdamW took without a word."""
    _, backbone = load_backbone(tiny_bert)
    network = Wrapper(backbone)
    bad = [
        ({"learning_rate": 0.0}, r"learning_rate=0.0 is not allowed; use a finite float > 0"),
        ({"learning_rate": float("inf")}, r"learning_rate=inf is not allowed"),
        ({"learning_rate": 1e-3, "top_learning_rate": float("inf")}, "top_learning_rate=inf"),
        ({"learning_rate": 1e-3, "weight_decay": float("inf")}, "weight_decay=inf"),
        ({"learning_rate": 1e-3, "layer_lr_decay": -0.5}, r"layer_lr_decay=-0.5 .* \(0, 1\]"),
        ({"learning_rate": 1e-3, "top_learning_rate": -1.0}, "top_learning_rate=-1.0"),
        ({"learning_rate": 1e-3, "weight_decay": -0.1}, r"weight_decay=-0.1 .* >= 0"),
    ]
    for kwargs, match in bad:
        with pytest.raises(ValueError, match=match):
            layerwise_param_groups(network, **kwargs)
    # not numbers, a train_backbone that is no bool ("no" counted as true), no network
    wrong = [
        ({"learning_rate": "1e-3"}, "learning_rate='1e-3' is not allowed"),
        ({"learning_rate": True}, "learning_rate=True is not allowed"),
        ({"learning_rate": 1e-3, "train_backbone": "no"}, "train_backbone='no' is not allowed"),
    ]
    for kwargs, match in wrong:
        with pytest.raises(TypeError, match=match):
            layerwise_param_groups(network, **kwargs)
    for other in (None, backbone):  # the encoder itself has no .backbone
        with pytest.raises(TypeError, match="network must be a torch module with a Hugging"):
            layerwise_param_groups(other, learning_rate=1e-3)
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="name one rate"):
        layerwise_param_groups(
            network, learning_rate=1e-3, top_learning_rate=5e-2, head_learning_rate=None
        )
