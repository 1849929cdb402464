"""Prediction's tiled layers (skbert._inference.cpu.tiled_layers) agree with the transformers
forward for each family they know (BERT, DistilBERT, MPNet, DeBERTa-v2, ModernBERT:
skbert._inference.cpu.families),
give every row the same bits whatever blocks come with it, apply only where they know the
structure, and follow the weights when they change; duplicate rows are computed once."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch
from transformers import AutoModel

from skbert import BertSentenceTransformer
from skbert._inference.cpu.products import ENV_VARIABLE, Blas, OneDnn, products_for_this_cpu
from skbert._inference.cpu.tiled_layers import _PLANS, tiled_forward  # _PLANS: see below
from skbert._text.encoding import distinct_rows

KINDS = [
    Blas.name,
    pytest.param(
        OneDnn.name,
        marks=pytest.mark.skipif(
            not OneDnn.available(), reason="this torch build lacks oneDNN's linear operations"
        ),
    ),
]


@pytest.fixture(params=KINDS)
def products(request, monkeypatch):
    """Each kind of matrix products in turn (plans built afresh). The plan cache is private:
    what it holds (a plan per backbone, built once) is what these tests check, and no public
    call shows it."""
    monkeypatch.setenv(ENV_VARIABLE, request.param)
    _PLANS.clear()
    yield request.param
    _PLANS.clear()


def _skip_bfloat16_where_onednn_cannot(kind, dtype):
    """oneDNN's bfloat16 products need AVX512-BW/VL/DQ or AVX-NE-CONVERT; skbert picks them
    only where torch runs AVX-512 kernels, but these tests force them on every CPU."""
    if kind == OneDnn.name and dtype == torch.bfloat16 and not OneDnn.runs_bfloat16():
        pytest.skip("oneDNN packs no bfloat16 weights on this CPU (no AVX512-BW/VL/DQ)")


def _load(path):
    return AutoModel.from_pretrained(path).eval()


def _probe(vocab, rows=3, length=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(5, vocab, (rows, length), generator=generator)


def _blocks(vocab, shapes, seed=0, token_types=True):
    """Blocks ``(ids, token types, n_real)`` of the given ``(rows, length, n_real)``, the rows
    after ``n_real`` repeating the real ones in turn (as row_blocks makes them); the token
    types None where the family has none (``token_types=False``)."""
    blocks = []
    for k, (rows, length, n_real) in enumerate(shapes):
        real = _probe(vocab, n_real, length, seed + k)
        ids = real[torch.arange(rows) % n_real]
        blocks.append((ids, torch.zeros_like(ids) if token_types else None, n_real))
    return blocks


#: the tiny checkpoints of each family with a fast path, and the family it must be read as
FAMILY_OF = {
    "tiny_bert": "bert",
    "tiny_roberta": "bert",
    "tiny_distilbert": "distilbert",
    "tiny_mpnet": "mpnet",
    "tiny_deberta": "deberta-v2",
    "tiny_modernbert": "modernbert",
    "packaged_model": "bert",
}


def _family_blocks(backbone, shapes, seed=0):
    has_types = "token_type_ids" in inspect.signature(backbone.forward).parameters
    return _blocks(backbone.config.vocab_size, shapes, seed, token_types=has_types)


def _reference(backbone, ids, types):
    kwargs = {} if types is None else {"token_type_ids": types}
    return backbone(input_ids=ids, output_hidden_states=True, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(FAMILY_OF))
def test_tiled_states_match_transformers(request, name, dtype, products):
    """Each family's tiled states agree with its transformers forward: within 1e-5 in float32
    (seen: up to 2.4e-7 on the tiny MPNet), within 2% of the states' scale in bfloat16."""
    _skip_bfloat16_where_onednn_cannot(products, dtype)
    backbone = _load(request.getfixturevalue(name)).to(dtype)
    blocks = _family_blocks(backbone, [(4, 9, 4), (6, 5, 2), (3, 12, 1), (8, 3, 7)])
    with torch.inference_mode():
        tiled = tiled_forward(backbone, blocks, True, 16)
        last_only = tiled_forward(backbone, blocks, False, 16)
    assert tiled is not None, f"the tiled path should apply to {name}"
    assert _PLANS[backbone][1].products.name == products
    assert _PLANS[backbone][1].family.name == FAMILY_OF[name]
    for (ids, types, _), got, last in zip(blocks, tiled, last_only, strict=True):
        with torch.inference_mode():
            expected = _reference(backbone, ids, types)
        assert len(got.hidden_states) == len(expected.hidden_states)
        for want, state in zip(expected.hidden_states, got.hidden_states, strict=True):
            assert state.shape == want.shape and state.dtype == dtype
            if dtype == torch.float32:
                torch.testing.assert_close(state, want, rtol=0, atol=1e-5)
            else:  # 8 bits of mantissa: within 2% of the states' scale (0.7% seen for MiniLM)
                error = (state.float() - want.float()).abs().max()
                assert error <= 2e-2 * want.float().abs().max()
        assert torch.equal(got.last_hidden_state, got.hidden_states[-1])
        assert last.hidden_states is None
        assert torch.equal(last.last_hidden_state, got.last_hidden_state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tile", [8, 16, 40])
@pytest.mark.parametrize(
    "name", ["tiny_bert", "tiny_distilbert", "tiny_mpnet", "tiny_deberta", "tiny_modernbert"]
)
def test_a_rows_bits_do_not_depend_on_the_other_blocks(request, name, tile, dtype, products):
    """The same block computed alone, with other blocks before or after it, or in another
    order gives the same bits: only its own shape matters (tiles are fixed, attention runs per
    block, MPNet's and DeBERTa's relative positions, ModernBERT's rotary tables and windows
    are computed per block length)."""
    _skip_bfloat16_where_onednn_cannot(products, dtype)
    backbone = _load(request.getfixturevalue(name)).to(dtype)
    target = _family_blocks(backbone, [(5, 7, 3)], seed=11)[0]
    others = _family_blocks(backbone, [(4, 9, 4), (6, 5, 2), (2, 13, 2), (9, 4, 9)], seed=3)
    with torch.inference_mode():
        alone = tiled_forward(backbone, [target], True, tile)[0]
        assert alone is not None
        companies = [
            tiled_forward(backbone, others[:2] + [target] + others[2:], True, tile)[2],
            tiled_forward(backbone, [target] + others[::-1], True, tile)[0],
            tiled_forward(backbone, others[3:] + [target], True, tile)[1],
        ]
    for got in companies:
        for want, state in zip(alone.hidden_states, got.hidden_states, strict=True):
            assert torch.equal(want, state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_modernbert_base_width_matches_transformers(dtype, products):
    """A random ModernBERT of base width (4 layers x 768, ModernBERT-base's pattern of one
    global layer in three and its window of 64 tokens each side) agrees with the transformers
    forward on blocks longer and shorter than the window: within 1e-5 in float32 (seen: 9.5e-7),
    2% of the scale in bfloat16 (seen: 1.3%, one or two bfloat16 steps of the states)."""
    _skip_bfloat16_where_onednn_cannot(products, dtype)
    import transformers

    if not hasattr(transformers, "ModernBertConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no ModernBERT")
    config = transformers.ModernBertConfig(
        vocab_size=512, num_hidden_layers=4, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        cls_token_id=1, sep_token_id=2,
    )  # fmt: skip
    assert config.sliding_window == 64 and config.layer_types[:3] == [
        "full_attention",
        "sliding_attention",
        "sliding_attention",
    ]
    torch.manual_seed(0)
    backbone = transformers.ModernBertModel(config).eval().to(dtype)
    blocks = _blocks(config.vocab_size, [(2, 130, 2), (3, 66, 2), (2, 20, 1)], token_types=False)
    _assert_tiled_matches(backbone, blocks, 256, "modernbert", dtype)


def _assert_tiled_matches(backbone, blocks, tile, family, dtype=torch.float32):
    """The plan of ``family`` is taken for ``backbone``, and its states of ``blocks`` are
    transformers': within 1e-5 in float32, 2% of the scale in bfloat16."""
    with torch.inference_mode():
        tiled = tiled_forward(backbone, blocks, True, tile)
        assert tiled is not None and _PLANS[backbone][1].family.name == family
        for (ids, _, _), got in zip(blocks, tiled, strict=True):
            expected = backbone(input_ids=ids, output_hidden_states=True).hidden_states
            for want, state in zip(expected, got.hidden_states, strict=True):
                error = (state.float() - want.float()).abs().max()
                if dtype == torch.float32:
                    assert error <= 1e-5
                else:
                    assert error <= 2e-2 * want.float().abs().max()


@pytest.mark.parametrize(
    "relative, types",
    [(True, None), (True, []), (False, ["c2p", "p2c"]), (False, ["c2p"]), (True, ["c2p"])],
)
def test_deberta_attention_settings_take_the_path_and_match(relative, types, products):
    """DeBERTa-v2 in other attention settings than v3's: relative attention without
    disentangled scores (pos_att_type None or empty: the path raised a TypeError, a float where
    a mask goes, and every prediction failed) and disentangled types without relative attention
    (transformers still divides the scores by sqrt(head size x (1 + types)): the path divided
    by sqrt(head size), was refused for weights of trained scale and computed another function
    for near-random ones). Weights of initializer range 0.2 make the scale show."""
    import transformers

    config = transformers.DebertaV2Config(
        vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, relative_attention=relative,
        pos_att_type=types, position_buckets=8, max_relative_positions=-1,
        position_biased_input=not relative, type_vocab_size=0, initializer_range=0.2,
    )  # fmt: skip
    torch.manual_seed(0)
    backbone = transformers.DebertaV2Model(config).eval()
    blocks = _blocks(config.vocab_size, [(4, 9, 4), (3, 12, 1)], token_types=False)
    _assert_tiled_matches(backbone, blocks, 16, "deberta-v2")


def test_modernbert_base_depth_in_bfloat16_takes_the_path():
    """At ModernBERT-base's full depth (22 layers x 768, random weights) bfloat16 drifts from
    float32 by 3-4 % of the scale in transformers' forward as in the tiled one, past 2 %: the
    check then holds the tiled states to transformers' own drift (and the structure to float32),
    so the path is taken, and its states are no further from float32 than 1.25 times
    transformers' bfloat16 states are."""
    import transformers

    if not hasattr(transformers, "ModernBertConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no ModernBERT")
    config = transformers.ModernBertConfig(
        vocab_size=512, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
        sep_token_id=2,
    )  # fmt: skip
    assert config.num_hidden_layers == 22 and config.hidden_size == 768
    torch.manual_seed(0)
    exact = transformers.ModernBertModel(config).eval()
    backbone = copy.deepcopy(exact).to(torch.bfloat16)
    blocks = _blocks(config.vocab_size, [(2, 90, 2)], token_types=False)
    with torch.inference_mode():
        tiled = tiled_forward(backbone, blocks, True, 256)
        assert tiled is not None and _PLANS[backbone][1].family.name == "modernbert"
        ids = blocks[0][0]
        want = exact(input_ids=ids).last_hidden_state
        hf = backbone(input_ids=ids).last_hidden_state.float()
        scale = want.abs().max()
        drift = (hf - want).abs().max() / scale
        error = (tiled[0].last_hidden_state.float() - want).abs().max() / scale
    assert drift > 2e-2  # the case the drift bound is for
    assert error <= 1.25 * drift, (float(error), float(drift))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_modernbert_refused_where_the_math_differs(tiny_modernbert, dtype):
    """The structure fits, the math does not: the check against the transformers forward
    refuses a local layer that transformers runs as a global one (another rotary base, no
    window) and a feed-forward pair with another activation, in float32 and in bfloat16
    (whose plan is checked in float32 on a float32 copy of its weights)."""

    def load(path):
        return _load(path).to(dtype)

    backbone = load(tiny_modernbert)
    blocks = _blocks(backbone.config.vocab_size, [(3, 7, 3)], token_types=False)
    with torch.inference_mode():
        assert tiled_forward(backbone, blocks, False, 16) is not None
    backbone = load(tiny_modernbert)  # a fresh one: the plan is kept while weights stay
    assert backbone.layers[1].attention_type == "sliding_attention"
    backbone.layers[1].attention_type = "full_attention"  # what transformers reads per layer
    with torch.inference_mode():
        assert tiled_forward(backbone, blocks, False, 16) is None
    backbone = load(tiny_modernbert)
    for layer in backbone.layers:
        layer.mlp.act = torch.nn.ReLU()
    with torch.inference_mode():
        assert tiled_forward(backbone, blocks, False, 16) is None


@pytest.mark.parametrize(
    "params",
    [
        {"pooling": "mean"},
        {"pooling": "cls", "layer": -2},
        {"pooling": "max", "layer": [0, -2, -1], "layer_combine": "concat"},
        {"pooling": "mean", "layer": [-2, -1], "layer_combine": "mean"},
    ],
    ids=["last", "second-to-last", "concat", "mean"],
)
def test_modernbert_vectors_of_every_layer_match_the_transformers_forward(tiny_modernbert, params):
    """ModernBERT's hidden states hold the final norm in the last one only; the vectors read
    from any layer or combination of layers are those of the transformers forward."""
    X = ["the cat sat on the mat", "a dog", "the movie was very very bad and not good at all ."]
    est = BertSentenceTransformer(tiny_modernbert, device="cpu", **params).fit(["a"])
    tiled = est.transform(X)
    assert _PLANS[est.network_.backbone][1] is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("skbert._inference.cpu.runner.tiled_forward", lambda *args: None)
        plain = est.transform(X)
    np.testing.assert_allclose(tiled, plain, rtol=0, atol=1e-5)


def test_not_taken_for_albert_training_or_gradients(tiny_albert, tiny_bert):
    albert = _load(tiny_albert)
    blocks = _blocks(albert.config.vocab_size, [(3, 7, 3)])
    with torch.inference_mode():
        assert tiled_forward(albert, blocks, False, 16) is None  # shared layers: not BERT's
    bert = _load(tiny_bert)
    with torch.no_grad():
        assert tiled_forward(bert, blocks, False, 16) is not None
    assert tiled_forward(bert, blocks, False, 16) is None  # gradients wanted
    bert.train()
    with torch.inference_mode():
        assert tiled_forward(bert, blocks, False, 16) is None  # dropout active
    bert.eval().to(torch.float64)
    with torch.inference_mode():
        assert tiled_forward(bert, blocks, False, 16) is None  # float32 or bfloat16 only
    bert.to(torch.float16)
    with torch.inference_mode():
        assert tiled_forward(bert, blocks, False, 16) is None
    bert.to(torch.bfloat16)
    with torch.inference_mode():
        assert tiled_forward(bert, blocks, False, 16) is not None


def test_not_taken_when_the_check_against_transformers_fails(tiny_bert):
    backbone = _load(tiny_bert)
    backbone.config.hidden_act = "gelu"
    for layer in backbone.encoder.layer:  # same structure, other math: must be refused
        layer.intermediate.intermediate_act_fn = torch.nn.ReLU()
    blocks = _blocks(backbone.config.vocab_size, [(3, 7, 3)])
    with torch.inference_mode():
        assert tiled_forward(backbone, blocks, False, 16) is None


def test_plan_follows_weight_changes(tiny_bert):
    backbone = _load(tiny_bert)
    blocks = _blocks(backbone.config.vocab_size, [(3, 7, 3)])
    with torch.inference_mode():
        before = tiled_forward(backbone, blocks, False, 16)[0].last_hidden_state.clone()
    with torch.no_grad():  # what an optimizer step does: change a weight in place
        backbone.encoder.layer[0].attention.self.key.weight.mul_(3.0)
        backbone.encoder.layer[-1].output.dense.bias.add_(0.5)
    with torch.inference_mode():
        after = tiled_forward(backbone, blocks, False, 16)[0].last_hidden_state
        expected = backbone(input_ids=blocks[0][0]).last_hidden_state
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, expected, rtol=1e-4, atol=1e-4)
    assert backbone in _PLANS


def test_weights_made_in_inference_mode_take_the_transformers_forward(tiny_bert):
    config = _load(tiny_bert).config
    with torch.inference_mode():  # such weights count no versions: changes would go unseen
        backbone = AutoModel.from_config(config).eval()
        blocks = _blocks(config.vocab_size, [(3, 7, 3)])
        assert tiled_forward(backbone, blocks, False, 16) is None
        assert backbone(input_ids=blocks[0][0]).last_hidden_state.shape == (3, 7, 16)


def test_transform_vectors_match_the_transformers_forward(packaged_model):
    """The tiled path changes speed, not results: vectors within float rounding of those of
    the transformers forward (the tiled path turned off)."""
    X = ["a man is playing a guitar .", "the cat sat on the mat", "short", "x " * 40]
    est = BertSentenceTransformer(packaged_model, pooling="mean", device="cpu").fit(["a"])
    tiled = est.transform(X)
    backbone = est.network_.backbone
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("skbert._inference.cpu.runner.tiled_forward", lambda *args: None)
        plain = est.transform(X)
    assert backbone in _PLANS and _PLANS[backbone][1] is not None
    np.testing.assert_allclose(tiled, plain, rtol=1e-4, atol=2e-6)


def test_distinct_rows_tells_shared_rows_apart_by_identity():
    shared = ([1, 5, 2], [0, 0, 0])
    rows = [shared, ([1, 6, 2], [0, 0, 0]), shared, ([1, 5, 2], [0, 0, 0])]
    distinct, where = distinct_rows(rows)
    assert [id(r) for r in distinct] == [id(rows[0]), id(rows[1]), id(rows[3])]
    assert where.tolist() == [0, 1, 0, 2]
    alone, where = distinct_rows(rows[:2])
    assert alone == rows[:2] and where.tolist() == [0, 1]


def test_repeated_texts_are_encoded_and_computed_once_with_the_same_bits(tiny_bert, monkeypatch):
    from skbert._text.encoding import encode_texts

    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(["a"])
    X = ["a cat", "the dog runs", "a cat", "a  cat", "the dog runs", "one more"]
    encoded = encode_texts(est.tokenizer_, est.special_tokens_, X, readout=est.readout_)
    assert encoded.rows[0] is encoded.rows[2] and encoded.rows[1] is encoded.rows[4]
    assert encoded.rows[3] is not encoded.rows[0]  # another text, even if it tokenizes alike
    seen = []
    read = est.network_.read_rows  # the rows of every block, tiled or not, are read here

    def counting(outputs, *args, **kwargs):
        out = read(outputs, *args, **kwargs)
        seen.append(int(outputs.last_hidden_state.shape[0]))
        return out

    monkeypatch.setattr(est.network_, "read_rows", counting)
    together = est.transform(X)
    rows_computed = sum(seen)
    assert np.array_equal(together[0], together[2]) and np.array_equal(together[0], together[3])
    assert np.array_equal(together[1], together[4])
    alone = np.vstack([est.transform([x]) for x in X])
    assert np.array_equal(together, alone)  # the copies have the bits of a text on its own
    seen.clear()
    est.transform(["a cat", "the dog runs", "a  cat", "one more"])
    assert rows_computed == sum(seen)  # six texts cost what their four distinct ones cost


def test_repeated_texts_and_pairs_count_in_the_truncation_report(tiny_bert):
    from skbert._text.encoding import encode_texts

    est = BertSentenceTransformer(tiny_bert, device="cpu", max_length=8).fit(["a"])
    long, short = "one two three four five six seven", "a cat"
    args = (est.tokenizer_, est.special_tokens_)
    single = encode_texts(*args, [long, short, long, long], readout=est.readout_)
    assert single.n_truncated == 3 and len(single) == 4
    pairs = encode_texts(*args, [long, short, long], [short, short, short], readout=est.readout_)
    assert pairs.n_truncated == 2 and pairs.rows[0] is pairs.rows[2]
    assert pairs.rows[1] is not pairs.rows[0]
    other = encode_texts(*args, [long, long], [short, long], readout=est.readout_)
    assert other.rows[0] is not other.rows[1]  # same first sentence, another pair


def test_verbose_says_which_chunked_texts_lost_tokens_past_max_chunks(tiny_bert, capsys):
    from skbert._text.encoding import encode_texts

    words = " ".join(["one two three four five six seven"] * 3)  # 21 tokens: 4 windows of 6
    est = BertSentenceTransformer(
        tiny_bert, device="cpu", max_length=8, truncation="chunks", max_chunks=3, verbose=1
    ).fit(["a"])
    encoded = encode_texts(
        est.tokenizer_,
        est.special_tokens_,
        [words, "one two three four five six seven", "a"],
        readout=est.readout_,
    )
    assert (encoded.n_truncated, encoded.n_cut) == (2, 1)  # 18 tokens kept of the 21
    assert [len(rows) for rows in encoded.rows] == [3, 2, 1]
    est.transform([words, "a cat"])
    err = capsys.readouterr().err
    assert (
        "1 of the 2 texts encoded exceed max_length=8 tokens and were split into chunks; 1 of them"
        in err
    )
    assert "more than max_chunks=3 windows and lost the tokens past those" in err
    est.set_params(max_chunks=None).fit(["a"]).transform([words])
    err = capsys.readouterr().err
    assert "split into chunks." in err and "max_chunks" not in err


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", KINDS)
def test_each_product_computes_a_row_from_that_row_alone(kind, dtype):
    """A row's bits depend neither on the other rows of the tile nor on its place in it, for
    every product of the tiled layers (the property that makes tiles of mixed blocks exact),
    with a bias or without, and each product computes what it says."""
    _skip_bfloat16_where_onednn_cannot(kind, dtype)
    products = {Blas.name: Blas, OneDnn.name: OneDnn}[kind]
    generator = torch.Generator().manual_seed(0)
    tile, width, out = 24, 40, 56

    def rand(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    raw, bias = rand(out, width) * 0.2, rand(out)
    weight = products.pack(raw, tile)
    first, second = rand(tile, width), rand(tile, width)
    second[5], second[tile - 1] = first[2], first[2]  # row 2 of `first`, elsewhere in `second`
    res_first, res_second = rand(tile, out), rand(tile, out)
    res_second[5], res_second[tile - 1] = res_first[2], res_first[2]

    def each(x, residual):
        return [
            products.linear(x, weight, bias, torch.empty((tile, out), dtype=dtype)),
            products.linear_add(x, residual, weight, bias, torch.empty((tile, out), dtype=dtype)),
            products.linear_gelu(x, weight, bias, torch.empty((tile, out), dtype=dtype)),
            products.linear_mul(x, residual, weight, bias, torch.empty((tile, out), dtype=dtype)),
            products.linear(x, weight, None, torch.empty((tile, out), dtype=dtype)),
        ]

    product = first.float() @ raw.float().t() + bias.float()
    wanted = [product, product + res_first.float(), torch.nn.functional.gelu(product)]
    wanted += [product * res_first.float(), product - bias.float()]
    tolerance = 1e-5 if dtype == torch.float32 else 3e-2
    for a, b, want in zip(each(first, res_first), each(second, res_second), wanted, strict=True):
        assert a.dtype == dtype and a.shape == (tile, out)
        assert torch.equal(a[2], b[5]) and torch.equal(a[2], b[tile - 1])
        assert (a.float() - want).abs().max() <= tolerance * (1 + want.abs().max())


def test_products_follow_the_cpu_and_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_VARIABLE, raising=False)
    avx512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
    expected = OneDnn if avx512 and OneDnn.available() else Blas
    assert products_for_this_cpu() is expected
    monkeypatch.setenv(ENV_VARIABLE, "BLAS")
    assert products_for_this_cpu() is Blas
    monkeypatch.setenv(ENV_VARIABLE, "cublas")
    with pytest.raises(ValueError, match=r"SKBERT_CPU_PRODUCTS='cublas'.*'blas', 'onednn'"):
        products_for_this_cpu()
