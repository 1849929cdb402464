"""int8 products whose steps around the product run fused, in compiled C
(:mod:`skbert._inference.cpu.native`): the kind of products ``precision="int8"`` uses where
that library loads, with :class:`~skbert._inference.cpu.quantised.Int8` (torch operations) as
the fall-back.

The arithmetic is :class:`~skbert._inference.cpu.quantised.Int8`'s: the same packed weights
(per output channel, smoothed, asymmetric and float channels where it packs them), each input
row quantised from that row alone, ``torch._int_mm`` for the product. What changes is the
passes over memory: quantising a row (smoothing, its peak or range, rounding) is one pass;
scaling the int32 sums back with the bias, the float channels' product, GELU or the residual
sum and, in a post-norm layer, the layer norm (:meth:`FusedInt8.linear_add_norm`, the ``norm``
of :meth:`FusedInt8.feed_forward`) is one pass; and in a plain feed-forward pair GELU's
outputs are quantised for the second product without being written out in float32. GELU's
``erf`` is a rational approximation within 2e-7 (torch's own ``erf`` is several times slower),
far below the int8 steps of the product that reads it; the layer norm sums a row in one fixed
order. So the vectors differ from the torch operations' in the last bits, and each text's
vector is still the same in every call.

Measured on a 2-core AMD EPYC (Zen 4, AVX512-VNNI and AVX512-BF16), one thread, 256-token tiles
of all-MiniLM-L6-v2: scaling back a 384 -> 1,536 product with GELU takes 0.18 ms in C, against
0.07 + 0.03 + 0.24 ms for torch's three operations. The int8 ``transform`` of the 2,758 STS-B
test sentences (2 cores, ``benchmarks/bench_int8.py``) ran at 0.98x-1.05x the speed of bf16
with these steps as torch operations, 1.24x-1.40x with the quantising and scaling back in C,
and 1.50x-1.57x (two runs) once the layer norms and float channels joined that pass, the
scratch arrays stopped being reallocated on every tile and attention ran compiled
(:mod:`skbert._inference.cpu.attention`, in every precision). Per tile and layer in a running
``transform``: the four int8 products about 2.3 ms, attention 0.4 ms, these steps about 0.45
ms.
"""

from __future__ import annotations

import functools

import torch

from .native import int8_kernels
from .quantised import Int8
from .scratch import scratch

__all__ = ["FusedInt8", "int8_products"]


def int8_products():
    """:class:`FusedInt8` where the compiled steps load, else
    :class:`~skbert._inference.cpu.quantised.Int8`."""
    return FusedInt8 if int8_kernels() is not None else Int8


@functools.lru_cache(maxsize=64)
def _zeros(size: int) -> torch.Tensor:
    """float32 zeros: the bias of a product without one."""
    return torch.zeros(size)


class FusedInt8(Int8):
    """:class:`~skbert._inference.cpu.quantised.Int8`'s products, with the steps around
    ``torch._int_mm`` in compiled C (weights packed by the same :meth:`Int8.pack`)."""

    name = "int8-fused"

    @staticmethod
    def linear(x, weight, bias, out):
        """``x @ W.T + b`` in ``out`` (returned)."""
        return _product(x, weight, bias, out, None, False)

    @staticmethod
    def linear_add(x, residual, weight, bias, out):
        """``x @ W.T + b + residual`` in ``out`` (returned)."""
        return _product(x, weight, bias, out, residual, False)

    @staticmethod
    def linear_gelu(x, weight, bias, out):
        """``gelu(x @ W.T + b)`` in ``out`` (returned)."""
        return _product(x, weight, bias, out, None, True)

    @staticmethod
    def linear_add_norm(x, residual, weight, bias, norm, out):
        """``layer_norm(x @ W.T + b + residual)`` in ``out`` (returned), with ``norm``'s
        ``(weight, bias or None, eps)``: in the pass that scales the sums back (a post-norm
        layer's attention output and its norm)."""
        return _product(x, weight, bias, out, residual, False, norm)

    @staticmethod
    def feed_forward(x, inner_weight, inner_bias, weight, bias, residual, inner, out, norm=None):
        """A plain feed-forward pair, ``gelu(x @ W1.T + b1) @ W2.T + b2 + residual``, in
        ``out`` (returned), then its layer norm where ``norm`` (``(weight, bias or None,
        eps)``) is given, where the second product is asymmetric (as :meth:`Int8.pack` packs
        the pair's second): GELU's outputs go straight from the first product's int32 sums to
        the second's int8 input, a row at a time (``inner`` is not written). Other pairs take
        the two products in turn."""
        if weight[3] is None:  # not asymmetric: no fused path
            gelu = FusedInt8.linear_gelu(x, inner_weight, inner_bias, inner)
            return _product(gelu, weight, bias, out, residual, False, norm)
        library = int8_kernels()
        sums, scales, _ = _quantised_sums(library, x, inner_weight)  # symmetric: smoothed
        rows, cols = sums.shape
        tail = weight[4]
        n_tail = 0 if tail is None else len(tail)
        quantised = scratch("middle", (rows, cols - n_tail), torch.int8)
        middle_scales = scratch("middle_scales", (rows,), torch.float32)
        zero_points = scratch("middle_zero_points", (rows,), torch.int32)
        tail_in = scratch("middle_tail", (rows, n_tail), torch.float32)
        buffer = scratch("row", (cols,), torch.float32)
        first_bias = _zeros(cols) if inner_bias is None else inner_bias
        library.gelu_quantise(
            sums.data_ptr(), rows, cols, inner_weight[1].data_ptr(), scales.data_ptr(),
            first_bias.data_ptr(), n_tail, quantised.data_ptr(), middle_scales.data_ptr(),
            zero_points.data_ptr(), tail_in.data_ptr(), buffer.data_ptr(),
        )  # fmt: skip
        second = scratch("sums2", (rows, weight[0].shape[1]), torch.int32)
        torch._int_mm(quantised, weight[0], out=second)
        return _scale_back(
            library, second, weight, bias, middle_scales, zero_points, out, residual, False,
            None if tail is None else tail_in, norm,
        )  # fmt: skip


def _product(x, weight, bias, out, residual, gelu, norm=None):
    """One product with its steps after (:class:`FusedInt8`'s ``linear*``)."""
    library = int8_kernels()
    tail = weight[4]
    x_tail = None
    if tail is not None:  # the last input channels in float32
        x, x_tail = x[:, : -len(tail)], x[:, -len(tail) :]
    sums, scales, zero_points = _quantised_sums(library, x, weight)
    return _scale_back(
        library, sums, weight, bias, scales, zero_points, out, residual, gelu, x_tail, norm
    )


def _quantised_sums(library, x, weight):
    """The int32 sums of ``x`` quantised per row (smoothed where the weight is; over each
    row's range where the weight is asymmetric) times the int8 weight; the rows' scales; their
    zero points (None for symmetric rows)."""
    rows, cols = x.shape
    quantised = scratch("input", (rows, cols), torch.int8)
    scales = scratch("row_scales", (rows,), torch.float32)
    zero_points = None
    if weight[3] is None:
        reciprocal = weight[2]
        library.quantise_symmetric(
            x.data_ptr(), rows, cols, x.stride(0),
            None if reciprocal is None else reciprocal.data_ptr(),
            quantised.data_ptr(), scales.data_ptr(),
        )  # fmt: skip
    else:
        zero_points = scratch("zero_points", (rows,), torch.int32)
        library.quantise_asymmetric(
            x.data_ptr(), rows, cols, x.stride(0), quantised.data_ptr(), scales.data_ptr(),
            zero_points.data_ptr(),
        )  # fmt: skip
    sums = scratch("sums", (rows, weight[0].shape[1]), torch.int32)
    torch._int_mm(quantised, weight[0], out=sums)
    return sums, scales, zero_points


def _scale_back(
    library, sums, weight, bias, scales, zero_points, out, residual, gelu, x_tail, norm=None
):
    """``out`` from the int32 ``sums``: scaled, the bias, plus the float channels' product
    (``x_tail`` times the weight's float rows, where it has them), then GELU or the residual,
    then the layer norm ``norm`` (``(weight, bias or None, eps)``) where given: one pass."""
    rows, cols = sums.shape
    bias = _zeros(cols) if bias is None else bias
    norm_weight, norm_bias, eps = (None, None, 0.0) if norm is None else norm
    library.scale_back(
        sums.data_ptr(), rows, cols, weight[1].data_ptr(), scales.data_ptr(), bias.data_ptr(),
        None if zero_points is None else zero_points.data_ptr(),
        None if zero_points is None else weight[3].data_ptr(),
        None if x_tail is None else x_tail.data_ptr(),
        0 if x_tail is None else x_tail.shape[1],
        0 if x_tail is None else x_tail.stride(0),
        None if x_tail is None else weight[4].data_ptr(),
        None if residual is None else residual.data_ptr(),
        0 if residual is None else residual.stride(0),
        int(gelu), out.data_ptr(), out.stride(0),
        None if norm_weight is None else norm_weight.data_ptr(),
        None if norm_bias is None else norm_bias.data_ptr(),
        eps, scratch("norm_row", (cols,), torch.float32).data_ptr(),
    )  # fmt: skip
    return out
