"""precision="int8": int8 products on the tiled CPU layers (skbert._inference.cpu.quantised),
the same bits for a text in every call, close to float32, for every estimator's prediction
methods; float32 with one warning where int8 cannot run; training in float32; kept through
save/load and pickles; its own feature-cache key.

The int8 products are exact integer arithmetic, so they give the same bits on every CPU; where
this one lacks int8 dot-product instructions (where skbert itself would predict in float32),
the tests force int8 products anyway (torch's kernel there is slow, not different), so they run
on every CPU whose torch multiplies int8 matrices."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch
from test_batch_invariance import one_by_one, sentences

import skbert
from skbert import BertSentenceTransformer, BertTextClassifier, BertTextRegressor
from skbert._inference import int8 as int8_module
from skbert._inference.cpu import quantised
from skbert._inference.cpu.fused_int8 import int8_products
from skbert._inference.cpu.quantised import (
    Int8,
    PeakRecorder,
    calibration_ids,
    float_channels,
    int8_instructions,
    int8_products_in_torch,
)
from skbert._inference.cpu.tiled_layers import _INT8_PLANS  # the int8 plan cache, see below

pytestmark = pytest.mark.skipif(
    not int8_products_in_torch(), reason="this torch has no int8 matrix product on the CPU"
)
#: This CPU's int8 products are torch's slow generic kernel (forced by the fixture below).
EMULATED = int8_instructions() is None


@pytest.fixture(autouse=True)
def _int8_products_on_every_cpu(monkeypatch):
    """Where this CPU has no int8 dot-product instructions, int8 runs all the same (the
    tests that check the fallback set their own reason)."""
    if EMULATED:
        monkeypatch.setattr(int8_module, "int8_instructions", lambda: "generic kernel")


TEXTS = ["a good film", "a bad film", "great acting", "terrible plot"] * 2
LABELS = np.array([1, 0, 1, 0] * 2)
TRAIN = {"max_epochs": 1, "batch_size": 4, "random_state": 0, "device": "cpu"}
FALLBACK = "precision='int8' predicts in float32 here"


def _cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _int8_plan(estimator):
    """The int8 plan of the estimator's encoder (private: no public call shows it), or None."""
    backbone = estimator.fitted_network()
    backbone = getattr(backbone, "encoder", backbone).backbone
    return _INT8_PLANS.get(backbone, (None, None))[1]


# ---------------------------------------------------------------- the products
def test_int8_rows_do_not_depend_on_the_other_rows_and_stay_close_to_fp32():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 48, generator=generator)
    weight = torch.randn(80, 48, generator=generator) * 0.1
    bias = torch.randn(80, generator=generator)
    packed = Int8.pack(weight, 64)
    out = torch.empty(64, 80)
    first = Int8.linear(x, packed, bias, out).clone()
    others = torch.cat([x[:7], torch.randn(57, 48, generator=generator) * 30])
    np.testing.assert_array_equal(Int8.linear(others, packed, bias, out)[:7], first[:7])
    reference = x @ weight.T + bias
    assert float((first - reference).abs().max()) < 0.02 * float(reference.abs().max())
    zeros = torch.zeros(64, 48)  # the filling of a last tile: the bias alone
    np.testing.assert_array_equal(Int8.linear(zeros, packed, bias, out), bias.expand(64, 80))
    residual = torch.randn(64, 80, generator=generator)
    added = Int8.linear_add(x, residual, packed, bias, torch.empty(64, 80))
    np.testing.assert_array_equal(added, first + residual)
    gelu = Int8.linear_gelu(x, packed, bias, torch.empty(64, 80))
    np.testing.assert_array_equal(gelu, torch.nn.functional.gelu(first))
    no_bias = Int8.linear(x, packed, None, torch.empty(64, 80)).clone()
    np.testing.assert_allclose(no_bias, first - bias, rtol=0, atol=1e-5)
    gated = Int8.linear_mul(x, residual, packed, None, torch.empty(64, 80))
    np.testing.assert_array_equal(gated, no_bias * residual)


def _with_an_outlier_channel(rows, generator):
    x = torch.randn(rows, 48, generator=generator)
    x[:, 5] *= 40.0  # as the norms' outputs of BERT-style layers have a few
    return x


def test_smoothing_keeps_each_row_alone_and_shrinks_the_error_of_an_outlier_channel():
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(80, 48, generator=generator) * 0.1
    bias = torch.randn(80, generator=generator)
    peaks = _with_an_outlier_channel(32, generator).abs().amax(0)  # another sample's peaks
    x = _with_an_outlier_channel(64, generator)
    reference = x @ weight.T + bias
    plain = Int8.linear(x, Int8.pack(weight, 64), bias, torch.empty(64, 80)).clone()
    smoothed_weight = Int8.pack(weight, 64, peaks)
    smoothed = Int8.linear(x, smoothed_weight, bias, torch.empty(64, 80)).clone()
    error_plain = float((plain - reference).abs().mean())
    error_smoothed = float((smoothed - reference).abs().mean())
    assert error_smoothed < 0.5 * error_plain, (error_smoothed, error_plain)
    others = torch.cat([x[:5], torch.randn(59, 48, generator=generator) * 100])
    again = Int8.linear(others, smoothed_weight, bias, torch.empty(64, 80))
    np.testing.assert_array_equal(again[:5], smoothed[:5])
    zeros = Int8.linear(torch.zeros(64, 48), smoothed_weight, bias, torch.empty(64, 80))
    np.testing.assert_array_equal(zeros, bias.expand(64, 80))
    quiet = torch.zeros(48)  # a channel the calibration never saw is not divided by zero
    quiet[5] = 1.0
    assert torch.isfinite(Int8.pack(weight, 64, quiet)[2]).all()


def test_asymmetric_rows_quantise_gelu_outputs_finer_and_each_row_alone():
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(80, 96, generator=generator) * 0.1
    bias = torch.randn(80, generator=generator)
    x = torch.nn.functional.gelu(torch.randn(64, 96, generator=generator) * 2)  # >= -0.17
    packed = Int8.pack(weight, 64, asymmetric=True)
    quantised_weight = packed[0].t().float() * packed[1][:, None]  # the same in both
    reference = x @ quantised_weight.T + bias  # the error of the inputs' quantisation alone
    symmetric = Int8.linear(x, Int8.pack(weight, 64), bias, torch.empty(64, 80)).clone()
    asymmetric = Int8.linear(x, packed, bias, torch.empty(64, 80)).clone()
    error_symmetric = float((symmetric - reference).abs().mean())
    error_asymmetric = float((asymmetric - reference).abs().mean())
    # 255 steps over [-0.17, max] rather than 254 over [-max, max]: about half the step
    assert error_asymmetric < 0.6 * error_symmetric, (error_asymmetric, error_symmetric)
    others = torch.cat([x[:6], torch.randn(58, 96, generator=generator) * 50 - 20])
    again = Int8.linear(others, packed, bias, torch.empty(64, 80))
    np.testing.assert_array_equal(again[:6], asymmetric[:6])
    zeros = Int8.linear(torch.zeros(64, 96), packed, bias, torch.empty(64, 80))
    np.testing.assert_array_equal(zeros, bias.expand(64, 80))  # the zero points cancel exactly
    negative = -x  # a row wholly below zero (its zero point at the top) works as well
    flipped = Int8.linear(negative, packed, None, torch.empty(64, 80))
    expected = negative @ quantised_weight.T
    assert float((flipped - expected).abs().max()) < 0.01 * float(expected.abs().max())


def test_the_loudest_channels_of_an_asymmetric_product_are_multiplied_in_float32():
    generator = torch.Generator().manual_seed(4)
    weight = torch.randn(80, 96, generator=generator) * 0.1
    weight[:, 5] *= 40  # a weight column far above the others
    peaks = torch.rand(96, generator=generator) + 0.5
    peaks[17] = 60.0  # an input channel far above the others on the calibration input
    loud = float_channels(peaks, weight)
    assert loud.tolist() == [5, 17]
    order = torch.cat([torch.tensor([i for i in range(96) if i not in (5, 17)]), loud])
    x = torch.nn.functional.gelu(torch.randn(64, 96, generator=generator) * 2)
    x[::4, 17] = 70.0  # that channel as loud on some tokens
    bias = torch.randn(80, generator=generator)
    exact = x @ weight.T + bias
    x, weight = x[:, order], weight[:, order]  # the caller puts the loud channels last
    packed = Int8.pack(weight, 64, asymmetric=True, float_tail=2)
    got = Int8.linear(x, packed, bias, torch.empty(64, 80)).clone()
    # the int8 product of the other channels, plus the loud ones in float32
    rest = Int8.linear(
        x[:, :-2], Int8.pack(weight[:, :-2], 64, asymmetric=True), bias, torch.empty(64, 80)
    )
    np.testing.assert_allclose(got, rest + x[:, -2:] @ weight[:, -2:].T, rtol=1e-5, atol=1e-5)
    whole = Int8.linear(x, Int8.pack(weight, 64, asymmetric=True), bias, torch.empty(64, 80))
    error, error_whole = float((got - exact).abs().max()), float((whole - exact).abs().max())
    assert error < 0.2 * error_whole, (error, error_whole)
    others = torch.cat([x[:6], torch.randn(58, 96, generator=generator) * 50])
    again = Int8.linear(others, packed, bias, torch.empty(64, 80))
    np.testing.assert_array_equal(again[:6], got[:6])  # each row alone
    zeros = Int8.linear(torch.zeros(64, 96), packed, None, torch.empty(64, 80))
    np.testing.assert_array_equal(zeros, torch.zeros(64, 80))


@pytest.mark.parametrize("model", ["tiny_bert", "tiny_modernbert"])
def test_float_channels_moved_last_keep_each_layer_the_same_function(request, model, monkeypatch):
    """With the bound lowered, half the inner channels of every layer are reordered (gated
    halves too) and multiplied in float32: the vectors stay as close to float32's as int8's
    with none, and each text keeps its bits alone."""
    X = sentences(40, seed=6, longest=30)
    path = request.getfixturevalue(model)
    fp32 = BertSentenceTransformer(path, device="cpu").fit(["a"]).transform(X)
    plain = BertSentenceTransformer(path, device="cpu", precision="int8").fit(["a"])
    # the vectors' distance to float32's (their cosines are within float32's rounding of 1 on
    # these tiny models, too close to tell the two apart)
    error_plain = np.abs(plain.transform(X) - fp32).mean()
    assert all(layer.float_tail == 0 for layer in _int8_plan(plain).layers)  # random weights
    monkeypatch.setattr(quantised, "FLOAT_CHANNEL_RATIO", 1.0)  # above the median: float
    est = BertSentenceTransformer(path, device="cpu", precision="int8").fit(["a"])
    int8 = est.transform(X)
    tails = [layer.float_tail for layer in _int8_plan(est).layers]
    inner = _int8_plan(est).layers[0].inner_size
    assert all(inner // 3 < tail < inner for tail in tails), (tails, inner)
    assert (1 - _cosines(int8, fp32)).max() <= 0.01
    # as close as int8 without float channels: on random weights GELU's outputs have no loud
    # channels, so moving half of them to float32 need not bring the vectors closer (tiny_bert:
    # 3.45e-5 against 3.28e-5; the gain on a loud channel is tested on one product above),
    # while a wrong order of the channels is far off (the output product's columns left
    # unordered: 3.0e-3, and its cosines still within 0.01)
    error = np.abs(int8 - fp32).mean()
    assert error < 2 * error_plain, (error, error_plain)
    np.testing.assert_array_equal(one_by_one(est.transform, X[:8]), int8[:8])


def test_the_peak_recorder_multiplies_in_float32_and_keeps_each_input_channels_peak():
    generator = torch.Generator().manual_seed(2)
    weight = torch.randn(40, 24, generator=generator)
    bias = torch.randn(40, generator=generator)
    recorded = PeakRecorder.pack(weight, 16)
    first, second = (torch.randn(16, 24, generator=generator) for _ in range(2))
    out = PeakRecorder.linear(first, recorded, bias, torch.empty(16, 40))
    torch.testing.assert_close(out, first @ weight.T + bias)
    PeakRecorder.linear_gelu(second, recorded, None, torch.empty(16, 40))
    np.testing.assert_array_equal(recorded.peaks, torch.cat([first, second]).abs().amax(0))
    np.testing.assert_array_equal(calibration_ids(1000), calibration_ids(1000))  # fixed
    assert int(calibration_ids(1000).max()) < 1000


@pytest.mark.parametrize(
    "capability, flags, found",
    [
        ("AVX512", {"avx512f", "avx512_vnni"}, "avx512_vnni"),
        ("AVX2", {"avx2", "avx512_vnni"}, None),  # torch does not run AVX-512 kernels here
        ("AVX2", {"avx2", "avx_vnni"}, "avx_vnni"),
        ("AVX512", {"avx512f", "amx_int8"}, "amx_int8"),
        ("AVX512", {"avx512f", "avx512_bf16"}, None),
        ("DEFAULT", {"avx_vnni"}, None),
    ],
)
def test_int8_instructions_read_the_capability_and_the_cpu_flags(
    monkeypatch, capability, flags, found
):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(quantised, "_cpu_flags", lambda: flags)
    int8_instructions.cache_clear()
    try:
        assert int8_instructions() == found
    finally:
        int8_instructions.cache_clear()


# ---------------------------------------------------------------- invariance and agreement
FAMILIES = ["tiny_bert", "tiny_distilbert", "tiny_mpnet", "tiny_deberta", "tiny_roberta"]


@pytest.mark.parametrize("model", [*FAMILIES, "packaged_model"])
def test_an_int8_text_alone_has_the_bits_it_gets_in_a_call_of_100(request, model, monkeypatch):
    if model == "packaged_model":
        _exact_products_where_emulated(monkeypatch)
    X = sentences(100, seed=4, longest=40)  # mixed lengths
    est = BertSentenceTransformer(request.getfixturevalue(model), device="cpu", precision="int8")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # the call of 100 on two cores, the texts alone on the session's
        together = est.fit(["a"]).transform(X)
    finally:
        torch.set_num_threads(threads)
    assert _int8_plan(est) is not None  # it ran int8
    assert _int8_plan(est).products is int8_products()  # the compiled steps where they build
    np.testing.assert_array_equal(one_by_one(est.transform, X[:30]), together[:30])
    order = np.random.default_rng(0).permutation(len(X))
    np.testing.assert_array_equal(est.transform([X[i] for i in order]), together[order])
    est.set_params(batch_size=3)
    np.testing.assert_array_equal(est.transform(X[::2] + X[1::2])[:50], together[::2])


@pytest.mark.parametrize(
    "model", ["tiny_bert", "tiny_distilbert", "tiny_mpnet", "tiny_deberta", "packaged_model"]
)
def test_int8_vectors_agree_with_fp32(request, model):
    X = sentences(60, seed=5)
    path = request.getfixturevalue(model)
    fp32 = BertSentenceTransformer(path, device="cpu", precision="fp32").fit(["a"]).transform(X)
    est = BertSentenceTransformer(path, device="cpu", precision="int8").fit(["a"])
    int8 = est.transform(X)
    assert _int8_plan(est) is not None
    assert not np.array_equal(int8, fp32)  # int8 products did run
    assert _cosines(int8, fp32).min() >= 0.99


def test_int8_runs_a_pre_norm_family_without_biases_and_with_a_gated_feed_forward(
    tiny_modernbert,
):
    X = sentences(40, seed=5, longest=30)
    fp32 = BertSentenceTransformer(tiny_modernbert, device="cpu").fit(["a"]).transform(X)
    est = BertSentenceTransformer(tiny_modernbert, device="cpu", precision="int8").fit(["a"])
    int8 = est.transform(X)
    assert _int8_plan(est) is not None
    assert not np.array_equal(int8, fp32)
    assert _cosines(int8, fp32).min() >= 0.99
    np.testing.assert_array_equal(one_by_one(est.transform, X[:10]), int8[:10])


def test_int8_weights_are_quantised_once_outside_the_estimator(tiny_bert):
    est = BertSentenceTransformer(tiny_bert, device="cpu", precision="int8").fit(["a"])
    before = dict(vars(est))
    est.transform(["one text"])
    plan = _int8_plan(est)
    est.transform(["another text", "and a third"])
    assert _int8_plan(est) is plan  # kept for the next call
    assert vars(est).keys() == before.keys()  # predicting set no attribute
    assert all(vars(est)[k] is v for k, v in before.items())
    est.fit(["a"])  # a new network: a new plan
    est.transform(["one text"])
    assert _int8_plan(est) is not plan


# ---------------------------------------------------------------- every estimator
def test_every_prediction_method_runs_int8(tiny_bert):
    clf = BertTextClassifier(tiny_bert, precision="int8", **TRAIN).fit(TEXTS, LABELS)
    reference = BertTextClassifier(tiny_bert, precision="fp32", **TRAIN).fit(TEXTS, LABELS)
    # trained in float32: the same network as a float32 fit
    for (name, got), want in zip(
        clf.network_.state_dict().items(), reference.network_.state_dict().values(), strict=True
    ):
        assert torch.equal(got, want), name
    X = sentences(20, seed=6)
    proba = clf.predict_proba(X)
    assert _int8_plan(clf) is not None
    np.testing.assert_allclose(proba, reference.predict_proba(X), atol=0.02)
    assert not np.array_equal(proba, reference.predict_proba(X))
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[proba.argmax(1)])
    scores = clf.decision_function(X)
    np.testing.assert_allclose(scores, reference.decision_function(X), atol=0.05)
    np.testing.assert_array_equal(one_by_one(clf.predict_proba, X), proba)

    reg = BertTextRegressor(tiny_bert, precision="int8", **TRAIN).fit(TEXTS, LABELS * 2.0)
    fp32_reg = BertTextRegressor(tiny_bert, precision="fp32", **TRAIN).fit(TEXTS, LABELS * 2.0)
    predicted = reg.predict(X)
    np.testing.assert_allclose(predicted, fp32_reg.predict(X), atol=0.05)
    np.testing.assert_array_equal(one_by_one(reg.predict, X).ravel(), predicted)

    st = BertSentenceTransformer(tiny_bert, device="cpu", precision="int8").fit(["a"])
    pairs = [[a, b] for a, b in zip(X[:10], X[10:], strict=True)]
    similarity = st.similarity(pairs)
    vectors = st.transform(X)
    np.testing.assert_allclose(similarity, _cosines(vectors[:10], vectors[10:]), atol=1e-5)


def test_int8_early_stopping_validates_with_the_prediction_path(tiny_bert):
    clf = BertTextClassifier(
        tiny_bert,
        precision="int8",
        early_stopping=True,
        validation_fraction=0.25,
        **{**TRAIN, "max_epochs": 2},
    ).fit(TEXTS * 2, np.r_[LABELS, LABELS])
    assert len(clf.validation_scores_) == clf.n_iter_


# ---------------------------------------------------------------- where int8 cannot run
@pytest.mark.parametrize(
    "missing, reason",
    [
        ("int8_instructions", "this CPU has no int8"),
        # torch 2.2 (the oldest supported) has torch._int_mm for CUDA only
        ("int8_products_in_torch", r"this torch \(.*\) has no int8 matrix"),
    ],
    ids=["no VNNI", "no CPU int8 product in torch"],
)
def test_without_int8_products_int8_warns_once_and_equals_fp32(
    tiny_bert, monkeypatch, missing, reason
):
    """Without int8 dot-product instructions, or a torch that multiplies int8 on the CPU,
    int8 predicts in float32 with one warning (per fit, at the user's call) saying why."""
    monkeypatch.setattr(
        int8_module, missing, (lambda: None) if missing == "int8_instructions" else (lambda: False)
    )
    X = sentences(30, seed=8)
    fp32 = BertSentenceTransformer(tiny_bert, device="cpu", precision="fp32").fit(["a"])
    est = BertSentenceTransformer(tiny_bert, device="cpu", precision="int8").fit(["a"])
    with pytest.warns(UserWarning, match=f"{FALLBACK}: {reason}") as caught:
        got = est.transform(X)
    ours = [w for w in caught if FALLBACK in str(w.message)]
    assert len(ours) == 1 and ours[0].filename == __file__  # it names the user's call
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per fit: no second warning
        again = est.transform(X[:5])
    np.testing.assert_array_equal(got, fp32.transform(X))
    np.testing.assert_array_equal(again, got[:5])


def test_an_encoder_the_tiled_layers_do_not_run_predicts_fp32_with_a_warning(tiny_albert):
    X = sentences(10, seed=9)
    fp32 = BertSentenceTransformer(tiny_albert, device="cpu", precision="fp32").fit(["a"])
    est = BertSentenceTransformer(tiny_albert, device="cpu", precision="int8").fit(["a"])
    with pytest.warns(UserWarning, match=f"{FALLBACK}: the CPU's fast path does not run"):
        got = est.transform(X)
    np.testing.assert_array_equal(got, fp32.transform(X))


def test_int8_on_an_accelerator_runs_fp32_with_a_warning(tiny_bert):
    assert "CPU only" in int8_module.int8_unavailable(torch.device("cuda"))
    est = BertSentenceTransformer(tiny_bert, device="cpu", precision="int8").fit(["a"])
    with pytest.warns(UserWarning, match=f"{FALLBACK}: int8 products run on the CPU only"):
        assert est._int8_runs(torch.device("cuda")) is False
    assert est._int8_runs(torch.device("cpu")) is True


def test_a_bad_precision_names_the_value_and_int8(tiny_bert):
    with pytest.raises(ValueError, match=r"'precision'.*'int8'.*Got 'int4'"):
        BertSentenceTransformer(tiny_bert, precision="int4").fit(["a"])


# ---------------------------------------------------------------- persistence and the cache
def test_save_load_and_pickle_keep_int8(tiny_bert, tmp_path):
    X = sentences(20, seed=10)
    clf = BertTextClassifier(tiny_bert, precision="int8", **TRAIN).fit(TEXTS, LABELS)
    proba = clf.predict_proba(X)
    loaded = skbert.load(clf.save(tmp_path / "clf"))
    unpickled = pickle.loads(pickle.dumps(clf))
    for copy in (loaded, unpickled):
        assert copy.precision == "int8"
        np.testing.assert_array_equal(copy.predict_proba(X), proba)
        assert _int8_plan(copy) is not None


def test_the_feature_cache_keeps_int8_and_fp32_vectors_apart(tiny_bert, tmp_path):
    X = sentences(30, seed=11)
    plain = {
        p: BertSentenceTransformer(tiny_bert, device="cpu", precision=p).fit(["a"]).transform(X)
        for p in ("fp32", "int8")
    }
    for first, second in (("fp32", "int8"), ("int8", "fp32")):
        root = tmp_path / first
        for precision in (first, second):
            cached = BertSentenceTransformer(
                tiny_bert, device="cpu", precision=precision, memory=root
            ).fit(["a"])
            np.testing.assert_array_equal(cached.transform(X), plain[precision])
        keys = sorted(p.read_text() for p in root.rglob("key.json"))
        # the key names the int8 products that ran (the compiled steps or torch operations)
        kind = int8_module.int8_kind()
        assert len(keys) == 2 and any(f'"precision": "{kind}"' in key for key in keys)


# ---------------------------------------------------------------- a base-size model
def _exact_int_mm(a, b, *, out=None):
    """``torch._int_mm``'s integer sums, computed in float64 (exact below 2**53): the same bits,
    seconds where torch's generic int8 kernel takes minutes on a 768-wide model."""
    sums = (a.double() @ b.double()).to(torch.int32)
    return sums if out is None else out.copy_(sums)


def _exact_products_where_emulated(monkeypatch):
    """Where this CPU's int8 products are torch's generic kernel (minutes on a real model),
    :func:`_exact_int_mm` in its place, after checking the two give the same bits here."""
    if not EMULATED:
        return
    generator = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (32, 768), dtype=torch.int8, generator=generator)
    b = torch.randint(-128, 128, (768, 64), dtype=torch.int8, generator=generator)
    assert torch.equal(_exact_int_mm(a, b), torch._int_mm(a, b))  # the same bits here
    monkeypatch.setattr(torch, "_int_mm", _exact_int_mm)


@pytest.mark.real_mpnet
def test_int8_runs_all_mpnet_base_v2_close_to_fp32(real_mpnet, monkeypatch):
    """Twelve layers of 768: the int8 plan passes its check (a bound of 0.1 on the probe had
    refused it) and the sentence vectors stay close to float32's, the worst of the STS-B test
    sentences among them (0.966 before the loudest channels of the feed-forward pair's second
    product were kept in float32; 0.998 with them)."""
    _exact_products_where_emulated(monkeypatch)
    X = ["Afghan police kill 5 Taliban fighters", *sentences(11, seed=12, longest=25)]
    fp32 = BertSentenceTransformer(real_mpnet, device="cpu").fit(["a"]).transform(X)
    est = BertSentenceTransformer(real_mpnet, device="cpu", precision="int8").fit(["a"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fall-back to float32
        int8 = est.transform(X)
    assert _int8_plan(est) is not None
    tails = [layer.float_tail for layer in _int8_plan(est).layers]
    assert tails[4] > 0 and tails[5] > 0 and max(tails) <= 8, tails  # what the text needs
    assert _cosines(int8, fp32).min() >= 0.99
    np.testing.assert_array_equal(one_by_one(est.transform, X[:3]), int8[:3])
