"""The compiled attention of the tiled layers (skbert._inference.cpu.attention and
attention_kernel.c): PyTorch's attention up to rounding at head sizes and lengths on either side
of the kernel's vector widths, each row from that row alone, bfloat16 projections, the blocks it
leaves to PyTorch (added scores, rotations, heads over 128), SKBERT_ATTENTION_KERNEL, and the
feature cache keeping the two kernels' vectors apart."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from kernel_helpers import kernel_fixtures
from torch.nn import functional as F

from skbert import BertSentenceTransformer
from skbert._inference.cpu import attention, native
from skbert._inference.cpu.tiled_layers import _PLANS

#: the compiled library (the test skipped without a compiler), and a fixture after which the
#: library's environment variable is read anew
kernel, fresh_choice = kernel_fixtures(native.attention_kernel, "attention runs PyTorch's kernel")


def _work(bias=None, rotate=None):
    return types.SimpleNamespace(bias=bias, rotate=rotate, scale=None, layer=0, memo={})


def _projections(rows, length, heads, size, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows * length, 3 * heads * size, generator=generator) * 2


def _reference(qkv, rows, length, heads, size):
    """PyTorch's attention in float64: ``(rows * length, heads * size)``."""
    part = qkv.double().view(rows, length, 3, heads, size).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(*part.unbind(0))
    return out.transpose(1, 2).reshape(rows * length, heads * size)


def _attend(qkv, rows, length, heads, dtype=torch.float32):
    context = torch.full((rows * length, qkv.shape[1] // 3), float("nan"), dtype=dtype)
    attention.attend_block(qkv.to(dtype), context, rows, rows, length, heads, _work())
    return context


@pytest.mark.parametrize("size", [8, 16, 24, 32, 48, 64, 100, 128])
@pytest.mark.parametrize("length", [1, 7, 8, 9, 16, 17, 40])
def test_the_compiled_attention_is_pytorchs_up_to_rounding(kernel, size, length):
    rows, heads = 3, 2
    qkv = _projections(rows, length, heads, size, seed=size * 100 + length)
    got = _attend(qkv, rows, length, heads)
    assert not got.isnan().any()  # every output written
    np.testing.assert_allclose(got, _reference(qkv, rows, length, heads, size), atol=2e-5)


def test_a_long_block_is_pytorchs_up_to_rounding(kernel):
    rows, length, heads, size = 1, 300, 3, 32
    qkv = _projections(rows, length, heads, size, seed=3)
    got = _attend(qkv, rows, length, heads)
    np.testing.assert_allclose(got, _reference(qkv, rows, length, heads, size), atol=2e-5)


@pytest.mark.parametrize("size, length", [(32, 13), (64, 16), (8, 33)])
def test_each_row_is_attended_from_that_row_alone(kernel, size, length):
    rows, heads = 5, 3
    qkv = _projections(rows, length, heads, size, seed=7)
    together = _attend(qkv, rows, length, heads)
    tokens = qkv.view(rows, length, -1)
    for row in range(rows):
        copy = tokens[row].clone()  # another place in memory, a block of one row
        alone = _attend(copy, 1, length, heads)
        assert torch.equal(alone, together.view(rows, length, -1)[row])


def test_bfloat16_projections_are_attended_in_float32(kernel):
    rows, length, heads, size = 2, 11, 2, 32
    qkv = _projections(rows, length, heads, size, seed=5).bfloat16()
    got = _attend(qkv, rows, length, heads, dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16
    expected = _reference(qkv.float(), rows, length, heads, size)
    np.testing.assert_allclose(got.float(), expected, atol=3e-2 * float(expected.abs().max()))


class _Refusing:
    """A stand-in for the library that fails the test if attention asks it."""

    def attend(self, *args):
        raise AssertionError("the compiled kernel ran")


@pytest.mark.parametrize("case", ["added scores", "rotation", "heads over 128"])
def test_blocks_it_does_not_compute_run_pytorchs_kernel(monkeypatch, case):
    monkeypatch.setattr(attention, "attention_kernel", lambda: _Refusing())
    heads, size, rows, length = 2, 16, 3, 5
    work = _work()
    if case == "added scores":
        work.bias = lambda layer, q, k, length, memo: torch.zeros(1, heads, length, length)
        work.scale = size**-0.5
    elif case == "rotation":
        work.rotate = lambda layer, q, k, length, memo: (q, k)
    else:
        size = 136
    qkv = _projections(rows, length, heads, size, seed=1)
    context = torch.empty(rows * length, heads * size)
    attention.attend_block(qkv, context, rows, rows, length, heads, work)
    np.testing.assert_allclose(context, _reference(qkv, rows, length, heads, size), atol=2e-5)


def test_a_block_with_repeats_gets_its_real_rows_from_either_kernel(kernel, monkeypatch):
    n_real, rows, length, heads, size = 2, 5, 6, 2, 16
    qkv = _projections(n_real, length, heads, size, seed=9)
    compiled = torch.empty(n_real * length, heads * size)
    attention.attend_block(qkv, compiled, n_real, rows, length, heads, _work())
    monkeypatch.setattr(attention, "attention_kernel", lambda: None)
    pytorchs = torch.empty_like(compiled)
    attention.attend_block(qkv, pytorchs, n_real, rows, length, heads, _work())
    np.testing.assert_allclose(compiled, pytorchs, atol=2e-5)


def test_skbert_attention_kernel_torch_runs_pytorchs_kernel(fresh_choice):
    fresh_choice.setenv(native.ATTENTION.variable, "torch")
    assert native.attention_kernel() is None
    assert attention.attention_kind() == "torch"


def test_without_a_compiler_attention_falls_back_or_fails_if_asked(fresh_choice, tmp_path):
    fresh_choice.setenv("SKBERT_KERNEL_CACHE", str(tmp_path))
    fresh_choice.setenv("CC", "no-such-compiler")
    fresh_choice.setenv("PATH", str(tmp_path))  # neither cc nor gcc
    assert native.attention_kernel() is None
    native.attention_kernel.cache_clear()
    fresh_choice.setenv(native.ATTENTION.variable, "native")
    match = "SKBERT_ATTENTION_KERNEL='native', but no C compiler"
    with pytest.raises(RuntimeError, match=match):
        native.attention_kernel()


def test_the_feature_cache_keeps_the_two_kernels_vectors_apart(
    kernel, tiny_bert, fresh_choice, tmp_path
):
    texts = ["a good film", "a bad film", "great acting and a plot", "terrible"] * 2
    root = tmp_path / "cache"

    def vectors():
        _PLANS.clear()
        est = BertSentenceTransformer(tiny_bert, device="cpu", memory=root).fit(["a"])
        return est.transform(texts)

    compiled = vectors()
    fresh_choice.setenv(native.ATTENTION.variable, "torch")
    native.attention_kernel.cache_clear()
    pytorchs = vectors()
    _PLANS.clear()
    keys = sorted(p.read_text() for p in root.rglob("key.json"))
    assert len(keys) == 2
    digest = native.source_digest(native.ATTENTION)
    assert any(f'"attention": "compiled-{digest}"' in k for k in keys)
    assert any('"attention": "torch"' in k for k in keys)
    np.testing.assert_allclose(compiled, pytorchs, atol=1e-5)
    fresh_choice.delenv(native.ATTENTION.variable)
    native.attention_kernel.cache_clear()
    np.testing.assert_array_equal(vectors(), compiled)  # read back from its own key
