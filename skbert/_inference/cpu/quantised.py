"""int8 matrix products for the tiled CPU layers (``precision="int8"``), and whether this CPU
has the instructions that make them pay off.

:class:`Int8` is a kind of products as :mod:`skbert._inference.cpu.products` defines them (the
same ``pack`` / ``linear`` / ``linear_add`` / ``linear_gelu``), on weights quantised once:

- each weight row (output channel) is scaled to int8 by its own largest magnitude
  (symmetric, ``round(w * 127 / max|w_row|)``);
- each row of the input (a token) is quantised the same way from that row alone, when the
  product runs (dynamic per-token scales);
- the product is ``torch._int_mm`` (int8 x int8 -> int32), exact integer arithmetic; the
  int32 sums are then scaled back to float32 by the two scales, with the bias, the residual
  sum or GELU applied in the same step.

So each output row depends on its own input row only, and with no rounding in the product
itself, on nothing of the blocking or the other rows of a tile: the bit-invariance contract of
:mod:`skbert._inference.predict` holds by construction (and is tested).

Measured for all-MiniLM-L6-v2's products on 256-token tiles, one thread, on a 2-core AMD EPYC
(Zen 5, AVX512-VNNI, AVX512-BF16, no AMX; torch 2.13, a loaded machine), 384 -> 1,536:
oneDNN fp32 1.09 ms, oneDNN bf16 0.55 ms, ``torch._int_mm`` 0.28 ms plus 0.03 ms to quantise
the input and 0.08 ms to scale back with the bias. oneDNN's quantised linear
(``torch.ops.onednn.qlinear_pointwise``, u8 x s8, 0.30 ms with the bias fused) takes one
activation scale per tensor only, so it needs a scale fixed beforehand (a calibration on data)
to keep each text independent of the others; a scale per call (fbgemm's dynamic quantisation)
would make a text's vector depend on its company. The weight is read as the transposed view of
its row-major int8 copy: ``torch._int_mm`` is 1.7x faster on it than on a contiguous transpose.
"""

from __future__ import annotations

import functools
import threading

import torch

__all__ = ["Int8", "int8_instructions", "int8_products_in_torch"]

#: The CPU flags (of ``/proc/cpuinfo``) of instructions with int8 dot products: AVX512-VNNI,
#: AVX-VNNI (AVX2 CPUs since Alder Lake / Zen 5), AMX-INT8.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


@functools.cache
def int8_instructions() -> str | None:
    """The int8 dot-product instructions of this CPU that torch runs (a flag of
    :data:`VNNI_FLAGS`), or None where it has none or torch cannot use them: then int8
    products are slower than float32 and ``precision="int8"`` runs float32.

    torch runs its vectorised kernels at the level :func:`torch.backends.cpu.get_cpu_capability`
    names (AVX2 or AVX512 on x86); the CPU's own flags are read from ``/proc/cpuinfo`` (Linux;
    elsewhere none is found).
    """
    if not int8_products_in_torch():
        return None
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith(("AVX2", "AVX512")):
        return None
    flags = _cpu_flags()
    for flag in VNNI_FLAGS:
        if flag in flags and (flag != "avx512_vnni" or capability.startswith("AVX512")):
            return flag
    return None


@functools.lru_cache(maxsize=1)
def int8_products_in_torch() -> bool:
    """Whether this torch multiplies int8 matrices on the CPU (``torch._int_mm``; older
    releases, 2.2 among them, have the operation for CUDA only). Probed once per process."""
    if not hasattr(torch, "_int_mm"):
        return False
    try:
        torch._int_mm(torch.ones(32, 64, dtype=torch.int8), torch.ones(64, 32, dtype=torch.int8))
    except (RuntimeError, NotImplementedError):
        return False
    return True


def _cpu_flags() -> set:
    """The flags of the first processor of ``/proc/cpuinfo`` (empty where it is missing)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


class Int8:
    """Products on int8 weights (per output channel) and int8 inputs (per row), accumulated
    exactly in int32, scaled back to float32 with the operation that follows fused in."""

    name = "int8"

    @staticmethod
    def pack(weight: torch.Tensor, tile: int) -> tuple:
        """``(int8 weight read as (in, out), float32 scale per output)`` of a float32
        ``weight`` of shape ``(out, in)``; the same for every tile size."""
        weight = weight.detach().float()
        peak = weight.abs().amax(1)
        scale = peak.clamp_min(torch.finfo(torch.float32).tiny) / 127.0
        quantised = torch.round(weight / scale[:, None]).clamp_(-127, 127).to(torch.int8)
        return quantised.t(), scale

    @staticmethod
    def linear(x, weight, bias, out):
        """``x @ W.T + b`` in ``out`` (returned)."""
        sums, row_scales = _scaled_sums(x, weight, out)
        return torch.addcmul(bias, sums, row_scales, out=out)

    @staticmethod
    def linear_add(x, residual, weight, bias, out):
        """``x @ W.T + b + residual`` in ``out`` (returned)."""
        Int8.linear(x, weight, bias, out)
        return out.add_(residual)

    @staticmethod
    def linear_gelu(x, weight, bias, out):
        """``gelu(x @ W.T + b)`` (exact GELU) in ``out`` (returned)."""
        Int8.linear(x, weight, bias, out)
        return torch.ops.aten.gelu_(out)


_SCRATCH = threading.local()  # per thread: the int8 input and int32 sums of the last shape


def _scratch(name: str, shape, dtype) -> torch.Tensor:
    """Memory of ``shape`` kept per thread for the next product of the same shape (fresh
    memory on every tile would cost page faults)."""
    kept = getattr(_SCRATCH, name, None)
    if kept is None or kept.shape != shape:
        kept = torch.empty(shape, dtype=dtype)
        setattr(_SCRATCH, name, kept)
    return kept


def _row_scales(x) -> torch.Tensor:
    """Per row of ``x``: its largest magnitude / 127, shape ``(rows, 1)`` (tiny for a row of
    zeros, such as the filling of the last tile, so that it quantises to zeros)."""
    peak = x.abs().amax(1, keepdim=True)  # 20x faster than vector_norm(x, inf, dim=1)
    return peak.clamp_min_(torch.finfo(torch.float32).tiny).div_(127.0)


def _scaled_sums(x, weight, out) -> tuple:
    """The exact int32 products of ``x`` quantised per row with the int8 ``weight``, times
    the weight's scales, in ``out``; and the rows' scales (applied by the caller)."""
    quantised_weight, weight_scale = weight
    row_scales = _row_scales(x)
    quantised = _scratch("input", x.shape, torch.int8)
    quantised.copy_(torch.div(x, row_scales).round_())
    sums = _scratch("sums", (x.shape[0], quantised_weight.shape[1]), torch.int32)
    torch._int_mm(quantised, quantised_weight, out=sums)
    return torch.mul(sums, weight_scale, out=out), row_scales
