"""The compiled int8 steps (skbert._inference.cpu.native, .fused_int8): the same arithmetic as
the torch operations of quantised.Int8 up to rounding, each row from that row alone (also at
widths that leave a scalar remainder after the vectorised loops, and for a row moved to another
place in memory), the fused feed-forward pair, the compiled library kept and reused, and the choices
of SKBERT_INT8_KERNELS (the torch operations, an error, the fall-back where no compiler is
found)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from kernel_helpers import kernel_fixtures

from skbert import BertSentenceTransformer
from skbert._inference import int8 as int8_module
from skbert._inference.cpu import native
from skbert._inference.cpu.fused_int8 import FusedInt8, int8_products
from skbert._inference.cpu.quantised import Int8, int8_products_in_torch

pytestmark = pytest.mark.skipif(
    not int8_products_in_torch(), reason="this torch has no int8 matrix product on the CPU"
)


#: the compiled library (the test skipped without a compiler), and a fixture after which the
#: library's environment variable is read anew
kernels, fresh_choice = kernel_fixtures(
    native.int8_kernels, "the int8 products run as torch operations"
)


def _case(rows, columns, outputs, seed, gelu_inputs=False):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, columns, generator=generator) * 2
    if gelu_inputs:
        x = torch.nn.functional.gelu(x)
    x[:, 3] *= 30  # an outlier channel, as the norms' outputs of BERT-style layers have
    weight = torch.randn(outputs, columns, generator=generator) * 0.1
    bias = torch.randn(outputs, generator=generator)
    residual = torch.randn(rows, outputs, generator=generator)
    return x, weight, bias, residual


@pytest.mark.parametrize("columns, outputs", [(48, 80), (37, 53), (384, 1536)])
@pytest.mark.parametrize("packing", ["plain", "smoothed", "asymmetric", "float tail"])
def test_fused_products_match_the_torch_operations_and_keep_each_row_alone(
    kernels, columns, outputs, packing
):
    rows = 40
    x, weight, bias, residual = _case(rows, columns, outputs, columns + outputs, packing != "plain")
    options = {
        "plain": {},
        "smoothed": {"input_peaks": x.abs().amax(0)},
        "asymmetric": {"asymmetric": True},
        "float tail": {"asymmetric": True, "float_tail": 2},
    }[packing]
    packed = Int8.pack(weight, rows, **options)
    scale = float((x @ weight.T).abs().max())
    for method, extra in [("linear", ()), ("linear_add", (residual,)), ("linear_gelu", ())]:
        expected = getattr(Int8, method)(x, *extra, packed, bias, torch.empty(rows, outputs))
        got = getattr(FusedInt8, method)(x, *extra, packed, bias, torch.empty(rows, outputs))
        # the same int8 values; the scaling back rounds in another order (measured: within
        # 1.5e-7 of the scale) and GELU's erf is a rational approximation (within 2e-7)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * scale, err_msg=method)
        # each row alone: the same bits beside other rows, at another position (another
        # alignment of its memory) and in a tile of another height
        others = torch.cat([torch.randn(5, columns) * 9, x[:7], torch.randn(2, columns)])
        other_extra = () if not extra else (torch.cat([residual[:5], residual[:7], residual[:2]]),)
        again = getattr(FusedInt8, method)(
            others, *other_extra, packed, bias, torch.empty(14, outputs)
        )
        np.testing.assert_array_equal(again[5:12], got[:7])
    no_bias = FusedInt8.linear(x, packed, None, torch.empty(rows, outputs)).clone()
    with_bias = FusedInt8.linear(x, packed, bias, torch.empty(rows, outputs))
    if packing == "float tail":  # the float channels' product is added after the bias
        np.testing.assert_allclose(no_bias + bias, with_bias, rtol=0, atol=1e-5)
    else:
        np.testing.assert_array_equal(no_bias + bias, with_bias)


def test_a_row_of_zeros_gives_the_bias_exactly(kernels):
    x, weight, bias, _ = _case(16, 48, 80, 1)
    for options in ({}, {"asymmetric": True}, {"input_peaks": x.abs().amax(0)}):
        packed = Int8.pack(weight, 16, **options)
        got = FusedInt8.linear(torch.zeros(16, 48), packed, bias, torch.empty(16, 80))
        np.testing.assert_array_equal(got, bias.expand(16, 80))


def _pair(rows, hidden, inner, seed, tail):
    """A feed-forward pair's case: the input, both weights (float32 and packed as the tiled
    layers pack them), the first bias, the second bias and a residual."""
    x, first, first_bias, _ = _case(rows, hidden, inner, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    second = torch.randn(hidden, inner, generator=generator) * 0.1
    second_bias = torch.randn(hidden, generator=generator)
    residual = torch.randn(rows, hidden, generator=generator)
    first_packed = Int8.pack(first, rows, input_peaks=x.abs().amax(0))
    second_packed = Int8.pack(second, rows, asymmetric=True, float_tail=tail)
    return x, first, first_packed, first_bias, second, second_packed, second_bias, residual


@pytest.mark.parametrize("tail", [0, 3])
def test_the_fused_feed_forward_pair_equals_its_two_products(kernels, tail):
    rows, hidden, inner = 48, 64, 160
    case = _pair(rows, hidden, inner, 7 + tail, tail)
    x, first, first_packed, first_bias, second, second_packed, second_bias, residual = case
    middle = torch.empty(rows, inner)
    two_steps = FusedInt8.linear_add(
        FusedInt8.linear_gelu(x, first_packed, first_bias, middle),
        residual, second_packed, second_bias, torch.empty(rows, hidden),
    )  # fmt: skip
    untouched = torch.full((rows, inner), 7.0)
    fused = FusedInt8.feed_forward(
        x, first_packed, first_bias, second_packed, second_bias, residual, untouched,
        torch.empty(rows, hidden),
    )  # fmt: skip
    # GELU's outputs are quantised from the same float32 values: the same bits
    np.testing.assert_array_equal(fused, two_steps)
    assert bool((untouched == 7.0).all())  # the inner states were not written out
    float_path = torch.nn.functional.gelu(x @ first.T + first_bias) @ second.T
    float_path += second_bias + residual
    error = float((fused - float_path).abs().max())
    assert error < 0.05 * float(float_path.abs().max()), error
    alone = FusedInt8.feed_forward(
        x[:9], first_packed, first_bias, second_packed, second_bias, residual[:9],
        torch.empty(9, inner), torch.empty(9, hidden),
    )  # fmt: skip
    np.testing.assert_array_equal(alone, fused[:9])


def _layer_norm(hidden, seed, with_bias=True):
    generator = torch.Generator().manual_seed(seed)
    weight = 1 + 0.3 * torch.randn(hidden, generator=generator)
    bias = torch.randn(hidden, generator=generator) if with_bias else None
    return weight, bias, 1e-12


@pytest.mark.parametrize("columns, outputs", [(48, 80), (37, 53), (384, 384)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_a_product_with_its_layer_norm_is_the_norm_of_the_product_and_each_row_its_own(
    kernels, columns, outputs, with_bias
):
    rows = 40
    x, weight, bias, residual = _case(rows, columns, outputs, columns * outputs)
    residual[:, 5] += 40  # an outlier channel in the residual stream, as BERT's states have
    packed = Int8.pack(weight, rows, input_peaks=x.abs().amax(0))
    norm = _layer_norm(outputs, outputs, with_bias)
    got = FusedInt8.linear_add_norm(x, residual, packed, bias, norm, torch.empty(rows, outputs))
    summed = FusedInt8.linear_add(x, residual, packed, bias, torch.empty(rows, outputs))
    expected = torch.nn.functional.layer_norm(summed, (outputs,), *norm)
    # the same sums; the norm's mean and variance summed in another order than torch's
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * float(expected.abs().max()))
    others = torch.cat([torch.randn(5, columns) * 9, x[:7], torch.randn(2, columns)])
    other_residual = torch.cat([residual[:5] * 3, residual[:7], residual[:2]])
    again = FusedInt8.linear_add_norm(
        others, other_residual, packed, bias, norm, torch.empty(14, outputs)
    )
    np.testing.assert_array_equal(again[5:12], got[:7])


@pytest.mark.parametrize("tail", [0, 3])
def test_the_feed_forward_pair_with_its_layer_norm_is_the_norm_of_the_pair(kernels, tail):
    rows, hidden, inner = 48, 64, 160
    x, _, first_packed, first_bias, _, second_packed, _, residual = _pair(
        rows, hidden, inner, 17 + tail, tail
    )
    norm = _layer_norm(hidden, 3)
    args = (x, first_packed, first_bias, second_packed, None, residual, torch.empty(rows, inner))
    pair = FusedInt8.feed_forward(*args, torch.empty(rows, hidden))
    normed = FusedInt8.feed_forward(*args, torch.empty(rows, hidden), norm)
    expected = torch.nn.functional.layer_norm(pair, (hidden,), *norm)
    np.testing.assert_allclose(normed, expected, rtol=0, atol=2e-5 * float(expected.abs().max()))
    alone = FusedInt8.feed_forward(
        x[:9], first_packed, first_bias, second_packed, None, residual[:9],
        torch.empty(9, inner), torch.empty(9, hidden), norm,
    )  # fmt: skip
    np.testing.assert_array_equal(alone, normed[:9])


def test_gelu_of_the_compiled_steps_is_within_a_millionth_of_torchs(kernels):
    rows, outputs = 8, 4096
    sums = torch.arange(rows * outputs, dtype=torch.int32).reshape(rows, outputs) - 16384
    weight_scale = torch.full((outputs,), 1e-3)
    row_scale = torch.ones(rows)
    bias = torch.zeros(outputs)
    out = torch.empty(rows, outputs)
    kernels.scale_back(
        sums.data_ptr(), rows, outputs, weight_scale.data_ptr(), row_scale.data_ptr(),
        bias.data_ptr(), None, None, None, 0, 0, None, None, 0, 1, out.data_ptr(), outputs, None,
        None, 0.0, None,
    )  # fmt: skip
    values = sums.float() * 1e-3  # -16.4 ... 16.4
    np.testing.assert_allclose(out, torch.nn.functional.gelu(values), rtol=0, atol=2e-6)


def test_the_compiled_library_is_kept_and_reused(fresh_choice, tmp_path):
    fresh_choice.setenv("SKBERT_KERNEL_CACHE", str(tmp_path))
    first = native._build(native.INT8)
    assert first.parent == tmp_path and first.exists()
    stamp = first.stat().st_mtime_ns
    runs = []
    fresh_choice.setattr(native.subprocess, "run", _recording(runs, native.subprocess.run))
    assert native._build(native.INT8) == first
    assert first.stat().st_mtime_ns == stamp
    assert all("-o" not in command for command in runs)  # the compiler's version only
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary left


def _recording(runs, run):
    def recorded(command, *args, **kwargs):
        runs.append(command)
        return run(command, *args, **kwargs)

    return recorded


def test_skbert_int8_kernels_torch_uses_the_torch_operations(fresh_choice):
    fresh_choice.setenv(native.INT8.variable, "torch")
    assert native.int8_kernels() is None
    assert int8_products() is Int8
    assert int8_module.int8_kind() == "int8"


@pytest.mark.parametrize("kernel", ["INT8", "ATTENTION"])
def test_a_bad_choice_of_kernel_names_the_variable_the_value_and_the_choices(monkeypatch, kernel):
    spec = getattr(native, kernel)  # SKBERT_INT8_KERNELS, SKBERT_ATTENTION_KERNEL
    monkeypatch.setenv(spec.variable, "fast")
    choices = rf"{spec.variable}='fast'.*'auto', 'native' or 'torch'"
    with pytest.raises(ValueError, match=choices):
        native.library(spec)


def test_without_a_compiler_int8_falls_back_to_torch_operations_or_fails_if_asked(
    fresh_choice, tmp_path, caplog
):
    fresh_choice.setenv("SKBERT_KERNEL_CACHE", str(tmp_path))
    fresh_choice.setenv("CC", "no-such-compiler")
    fresh_choice.setenv("PATH", str(tmp_path))  # neither cc nor gcc
    with caplog.at_level(logging.INFO, logger="skbert"):
        assert native.int8_kernels() is None
    assert "no C compiler was found" in caplog.text
    assert int8_products() is Int8
    native.int8_kernels.cache_clear()
    fresh_choice.setenv(native.INT8.variable, "native")
    with pytest.raises(RuntimeError, match="SKBERT_INT8_KERNELS='native', but no C compiler"):
        native.int8_kernels()


def test_a_failed_compilation_says_why(fresh_choice, tmp_path):
    fresh_choice.setenv("SKBERT_KERNEL_CACHE", str(tmp_path))
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C\n")
    fresh_choice.setattr(native, "INT8", native.INT8._replace(source=broken))
    fresh_choice.setenv(native.INT8.variable, "native")
    with pytest.raises(RuntimeError, match="compiling broken.c failed"):
        native.int8_kernels()


def test_the_fused_and_torch_paths_give_an_estimator_close_vectors_under_their_own_kinds(
    kernels, tiny_bert, fresh_choice, tmp_path
):
    fresh_choice.setattr(int8_module, "int8_instructions", lambda: "forced")
    texts = ["a good film", "a bad film", "great acting and a plot", "terrible"] * 3
    est = BertSentenceTransformer(tiny_bert, precision="int8", device="cpu").fit(texts)
    assert int8_module.int8_kind() == f"int8-fused-{native.source_digest(native.INT8)}"
    fused = est.transform(texts)
    fresh_choice.setenv(native.INT8.variable, "torch")
    native.int8_kernels.cache_clear()
    from skbert._inference.cpu.tiled_layers import _INT8_PLANS

    _INT8_PLANS.clear()  # the plan was made with the fused products
    plain = est.transform(texts)
    cosine = (fused * plain).sum(1) / np.linalg.norm(fused, axis=1) / np.linalg.norm(plain, axis=1)
    assert cosine.min() > 0.999, cosine.min()
    assert int8_module.int8_kind() == "int8"
    _INT8_PLANS.clear()
