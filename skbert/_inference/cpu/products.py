"""The matrix products of the tiled CPU layers: torch's BLAS, or oneDNN with prepacked weights.

:mod:`skbert._inference.cpu.tiled_layers` runs every product of a BERT layer on tiles of a
fixed number of tokens, so a weight can be laid out once for that tile size in the form the product
kernel reads fastest, and a product can carry the operation that follows it (the bias, a residual
sum, GELU, a gate's product). oneDNN, which PyTorch ships for its CPU build, offers both
(``torch.ops.mkldnn._linear_pointwise`` on a weight from ``_reorder_linear_weight``); torch's
default BLAS (MKL) offers neither but is the better kernel on some CPUs.

Measured for all-MiniLM-L6-v2's products on 256-token tiles, one thread (torch 2.13):

- AMD EPYC (Zen 4, AVX-512): MKL ``addmm`` 97-102 GFLOP/s, oneDNN on prepacked weights
  109-112 GFLOP/s; the whole fp32 ``transform`` of the 2,758 STS-B test sentences went from
  5.14 s to 4.60 s on 2 cores, with the same bits for a text in every call.
- AMD EPYC (Zen 3, AVX2 only): oneDNN's linear with GELU was slower than MKL's ``addmm``
  (measured in an earlier session).

So oneDNN is taken where torch runs its AVX-512 kernels
(:func:`torch.backends.cpu.get_cpu_capability`), torch's BLAS elsewhere. The choice depends on
the machine only, never on timings, so that a text's vector is the same in every call and every
process on one machine (the frozen-feature cache relies on it); ``SKBERT_CPU_PRODUCTS=blas`` or
``=onednn`` overrides it (say, to compare).

Both kinds compute each row of a tile from that row alone: its bits do not depend on the other
rows of the tile (checked in the tests).
"""

from __future__ import annotations

import functools
import os

import torch

__all__ = ["AfterTheProduct", "Blas", "OneDnn", "products_for_this_cpu"]

#: Environment variable that forces a kind of products: "blas" or "onednn".
ENV_VARIABLE = "SKBERT_CPU_PRODUCTS"


class AfterTheProduct:
    """A kind of products whose bias is its ``linear``'s and whose residual sum, GELU and gate
    follow the product as steps of their own: :meth:`linear_add`, :meth:`linear_gelu` and
    :meth:`linear_mul` from the subclass's ``linear``, in ``out``."""

    @classmethod
    def linear_add(cls, x, residual, weight, bias, out):
        """``x @ W.T + b + residual``, in ``out`` (returned)."""
        return cls.linear(x, weight, bias, out).add_(residual)

    @classmethod
    def linear_gelu(cls, x, weight, bias, out):
        """``gelu(x @ W.T + b)`` (exact GELU), in ``out`` (returned)."""
        return torch.ops.aten.gelu_(cls.linear(x, weight, bias, out))

    @classmethod
    def linear_mul(cls, x, other, weight, bias, out):
        """``(x @ W.T + b) * other`` (a gate), in ``out`` (not ``other``; returned)."""
        return cls.linear(x, weight, bias, out).mul_(other)


class Blas(AfterTheProduct):
    """Products through torch's BLAS (``torch.addmm``) into given memory; the weight is a
    transposed view of the ``nn.Linear`` weight."""

    name = "blas"

    @staticmethod
    def pack(weight: torch.Tensor, tile: int) -> torch.Tensor:
        """The weight as :meth:`linear` reads it (``weight`` of shape ``(out, in)``)."""
        return weight.t()

    @staticmethod
    def linear(x, weight, bias, out):
        """``x @ W.T + b`` (``b`` None: no bias), written into ``out`` (returned)."""
        if bias is None:
            return torch.mm(x, weight, out=out)
        return torch.addmm(bias, x, weight, out=out)


class OneDnn:
    """Products through oneDNN on weights prepacked for the tile size, the bias, residual sum,
    GELU and gate fused into the product."""

    name = "onednn"

    @staticmethod
    def available() -> bool:
        """Whether this torch build has the oneDNN operations used here."""
        ops = torch.ops.mkldnn
        return (
            torch.backends.mkldnn.is_available()
            and hasattr(ops, "_linear_pointwise")
            and hasattr(ops, "_reorder_linear_weight")
        )

    @staticmethod
    @functools.cache
    def runs_bfloat16() -> bool:
        """Whether oneDNN packs bfloat16 weights on this CPU (it needs AVX512-BW/VL/DQ or
        AVX-NE-CONVERT: on an AVX2-only CPU, such as a Zen 3, it refuses). The products are
        chosen only where torch runs AVX-512 kernels (:func:`products_for_this_cpu`), where it
        does; this tells where ``SKBERT_CPU_PRODUCTS="onednn"`` cannot run bfloat16."""
        if not OneDnn.available():
            return False
        try:
            OneDnn.pack(torch.zeros(16, 16, dtype=torch.bfloat16), 16)
        except RuntimeError:
            return False
        return True

    @staticmethod
    def pack(weight: torch.Tensor, tile: int) -> torch.Tensor:
        return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), tile)

    @staticmethod
    def linear(x, weight, bias, out):
        out.copy_(torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], ""))
        return out

    @staticmethod
    def linear_add(x, residual, weight, bias, out):
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, bias, "add")

    @staticmethod
    def linear_gelu(x, weight, bias, out):
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "gelu", [], "none")

    @staticmethod
    def linear_mul(x, other, weight, bias, out):
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, weight, bias, "mul")


_KINDS = {kind.name: kind for kind in (Blas, OneDnn)}


def products_for_this_cpu():
    """:class:`OneDnn` where torch runs AVX-512 kernels and has the oneDNN operations, else
    :class:`Blas`; ``SKBERT_CPU_PRODUCTS`` (``"blas"`` or ``"onednn"``) overrides.

    Raises
    ------
    ValueError
        If ``SKBERT_CPU_PRODUCTS`` names no kind, or ``"onednn"`` where this torch lacks it.
    """
    forced = os.environ.get(ENV_VARIABLE, "").strip().lower()
    if forced:
        if forced not in _KINDS:
            raise ValueError(
                f"{ENV_VARIABLE}={forced!r} is not a kind of CPU matrix products; "
                f"use one of {sorted(_KINDS)} (or unset it to choose by the CPU)."
            )
        if forced == OneDnn.name and not OneDnn.available():
            raise ValueError(
                f"{ENV_VARIABLE}='onednn', but this torch build lacks oneDNN's linear "
                "operations; use 'blas' (or unset it)."
            )
        return _KINDS[forced]
    capability = torch.backends.cpu.get_cpu_capability()
    if capability.startswith("AVX512") and OneDnn.available():
        return OneDnn
    return Blas
