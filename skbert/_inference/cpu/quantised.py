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

A few input channels of BERT-style layers carry values 20-40 times the others' (all-MiniLM-L6-v2:
up to 30 in a norm's output whose median channel peaks near 0.8), so a token's int8 steps, set by
its largest value, are coarse for every other channel. Two refinements, both still per row:

- the products that read a norm's output are *smoothed* (SmoothQuant, Xiao et al. 2023): input
  channel ``j`` is divided by ``s_j = peak_j ** 0.5 / max|W[:, j]| ** 0.5`` and the weight's
  column multiplied by it, which leaves the product unchanged and balances the channels'
  ranges between the two sides. The peaks ``peak_j`` are measured once per version of the
  weights, by :class:`PeakRecorder` on a fixed calibration input (token ids drawn with a fixed
  seed, :func:`calibration_ids`): no data of any call enters them, so a text's vector still
  depends on that text alone. Smoothing only rescales: the per-token scales still cover every
  value, so a channel the calibration underrates is never clipped;
- the feed-forward pair's second product reads GELU's outputs (at least -0.17, long-tailed
  above), which a symmetric range spends half its steps on; its rows are quantised over their
  own ``[min, max]`` with a zero point (``asymmetric``), corrected in the int32 sums exactly.
  Its few loudest input channels (:func:`float_channels`: in base-size models the "massive
  activations" of the special tokens, read by weight columns 20-100 times the typical one) are
  multiplied in float32 (``float_tail``) and left out of the int8 ranges of both sides.

Over the 2,758 STS-B test sentences (``benchmarks/int8_quality.py``), all-MiniLM-L6-v2's worst
text's cosine to float32 went from 0.9818 (plain) to 0.9954 with the first two, 0.9957 with
all three, the mean from 0.9965 to 0.9993; all-mpnet-base-v2's worst from 0.9660 (the first
two) to 0.9919 (``_LayerWeights._int8_options`` in :mod:`skbert._inference.cpu.tiled_layers`
says which product gets which).

Measured for all-MiniLM-L6-v2's products on 256-token tiles, one thread, on a 2-core AMD EPYC
(Zen 5, AVX512-VNNI, AVX512-BF16, no AMX; torch 2.13, a loaded machine), 384 -> 1,536:
oneDNN fp32 1.09 ms, oneDNN bf16 0.55 ms, ``torch._int_mm`` 0.28 ms plus 0.03 ms to quantise
the input and 0.08 ms to scale back with the bias. oneDNN's quantised linear
(``torch.ops.onednn.qlinear_pointwise``, u8 x s8, 0.30 ms with the bias fused) takes one
activation scale per tensor only, so it needs a scale fixed beforehand (a calibration on data)
to keep each text independent of the others; a scale per call (fbgemm's dynamic quantisation)
would make a text's vector depend on its company. The weight is read as the transposed view of
its row-major int8 copy: ``torch._int_mm`` is 1.7x faster on it than on a contiguous transpose.
These timings predate the smoothing, the asymmetric rows and the float channels, which add a
pass over a smoothed product's input, a range and an int32 correction to the second
feed-forward product and a float32 product on its few float channels.

As torch operations, each of those steps is a pass over memory of its own, and they cost more
than the product: on a 2-core AMD EPYC (Zen 4, AVX512-VNNI), one thread, a 256-token tile of
all-MiniLM-L6-v2's 384 -> 1,536 product took 0.75 ms in ``torch._int_mm`` and 1.33 ms in all
with GELU (torch's exact GELU alone 0.24 ms), against 1.55 ms for oneDNN's bf16 product with
GELU fused. So this class is the fall-back: ``precision="int8"`` runs
:class:`~skbert._inference.cpu.fused_int8.FusedInt8`, the same arithmetic with those steps
fused in compiled C, wherever the machine's C compiler builds it
(:mod:`skbert._inference.cpu.native`).
"""

from __future__ import annotations

import functools

import torch

from .products import AfterTheProduct, Blas
from .scratch import scratch

__all__ = ["Int8", "PeakRecorder", "calibration_ids", "int8_instructions", "int8_products_in_torch"]

#: The CPU flags (of ``/proc/cpuinfo``) of instructions with int8 dot products: AVX512-VNNI,
#: AVX-VNNI (AVX2 CPUs since Alder Lake / Zen 5), AMX-INT8.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")

#: SmoothQuant's migration strength: how much of an input channel's range moves into the
#: weight's column (0: none, 1: all); 0.5 balances the two, as Xiao et al. recommend for BERT-
#: and OPT-style models.
SMOOTHING = 0.5
#: A channel's calibration peak is taken as at least this fraction of the median channel's, so
#: that a channel quiet on the calibration input is not divided by a tiny number (which a
#: large value of it in a real text would turn into a huge one, coarsening its whole token).
PEAK_FLOOR = 0.1
#: An input channel of an asymmetric product (the feed-forward pair's second, which reads GELU's
#: outputs) stays in float32 where its weight column's peak or its calibration peak is over this
#: many times the median channel's: a handful of channels per layer in base-size models (the
#: "massive activations" of special tokens, and the weights that read them), which would
#: otherwise set the int8 step of every weight row and every token that meets them (see
#: :func:`float_channels`).
FLOAT_CHANNEL_RATIO = 16.0
#: The calibration input: rows x tokens of token ids drawn with a fixed seed.
CALIBRATION_SHAPE = (16, 32)


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


class Int8(AfterTheProduct):
    """Products on int8 weights (per output channel) and int8 inputs (per row), accumulated
    exactly in int32, scaled back to float32 with the bias in the same step."""

    name = "int8"

    @staticmethod
    def pack(
        weight: torch.Tensor,
        tile: int,
        input_peaks: torch.Tensor | None = None,
        asymmetric: bool = False,
        float_tail: int = 0,
    ) -> tuple:
        """``(int8 weight read as (in, out), float32 scale per output, reciprocal smoothing
        factor per input channel or None, int32 sum per output or None, float32 weight of the
        last input channels read as (tail, out) or None)`` of a float32 ``weight`` of shape
        ``(out, in)``; the same for every tile size.

        With ``input_peaks`` (the largest magnitude of each input channel on the calibration
        input, :class:`PeakRecorder`) the product is smoothed: the weight's columns are
        multiplied by the smoothing factors (:func:`smoothing_factors`) and each input is
        divided by them before it is quantised. With ``asymmetric`` each input row is
        quantised over its own range ``[min, max]`` (255 steps, a zero point per row) rather
        than ``[-max|x|, max|x|]``, for inputs mostly on one side of zero, such as GELU's
        outputs; the sums of the int8 weight's rows then correct the products for the zero
        points, in exact integers. With ``float_tail`` the last ``float_tail`` input channels
        (:func:`float_channels`, which the caller has moved there) are multiplied in float32
        and left out of the int8 weight and of the inputs' int8 ranges."""
        weight = weight.detach().float()
        tail = None
        if float_tail:
            tail = weight[:, -float_tail:].t().contiguous()
            weight = weight[:, :-float_tail]
        reciprocal = None
        if input_peaks is not None:
            factors = smoothing_factors(input_peaks, weight)
            weight = weight * factors
            reciprocal = factors.reciprocal()
        peak = weight.abs().amax(1)
        scale = peak.clamp_min(torch.finfo(torch.float32).tiny) / 127.0
        quantised = torch.round(weight / scale[:, None]).clamp_(-127, 127).to(torch.int8)
        sums = quantised.sum(1, dtype=torch.int32) if asymmetric else None
        return quantised.t(), scale, reciprocal, sums, tail

    @staticmethod
    def linear(x, weight, bias, out):
        """``x @ W.T + b`` (``b`` None: no bias) in ``out`` (returned)."""
        tail = weight[4]
        if tail is not None:  # the last input channels in float32
            x, x_tail = x[:, : -len(tail)], x[:, -len(tail) :]
        sums, row_scales = _scaled_sums(x, weight, out)
        if bias is None:
            out = sums.mul_(row_scales)
        else:
            out = torch.addcmul(bias, sums, row_scales, out=out)
        return out if tail is None else out.addmm_(x_tail, tail)


def float_channels(input_peaks: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The input channels of ``weight`` (``(out, in)``) that an asymmetric int8 product
    leaves in float32, ascending: those whose weight column's peak magnitude or calibration
    peak (``input_peaks``) is over ``FLOAT_CHANNEL_RATIO`` times the median channel's.

    In all-mpnet-base-v2 such channels carry 10 to 70 times the typical GELU output on the
    special tokens, read by weights 20 to 100 times the typical; in int8 with them, one STS-B
    sentence's vector fell to a cosine of 0.966 to its float32 one (0.998 with them in
    float32: two to four channels per layer). Fewer than half the channels can be over the
    bound on either count, so some always stay in int8."""
    columns = weight.detach().abs().amax(0).float()
    peaks = input_peaks.float()
    loud = (columns > FLOAT_CHANNEL_RATIO * columns.median()) | (
        peaks > FLOAT_CHANNEL_RATIO * peaks.median()
    )
    return loud.nonzero().flatten()


def smoothing_factors(input_peaks: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """SmoothQuant's factor per input channel of ``weight`` (``(out, in)``, float32):
    ``peak ** SMOOTHING / max|W[:, j]| ** (1 - SMOOTHING)``, each peak raised to at least
    ``PEAK_FLOOR`` times the median one (and both sides to a tiny positive number, for channels
    of zeros)."""
    tiny = torch.finfo(torch.float32).tiny
    peaks = input_peaks.float()
    peaks = peaks.clamp_min(max(float(peaks.median()) * PEAK_FLOOR, tiny))
    columns = weight.abs().amax(0).clamp_min(tiny)
    return peaks.pow(SMOOTHING) / columns.pow(1.0 - SMOOTHING)


class PeakRecorder(AfterTheProduct):
    """Float32 products that record the largest magnitude of each input channel of each
    product: run on the calibration input, they give :meth:`Int8.pack` its ``input_peaks``.
    :meth:`pack` returns a :class:`Recorded` weight, whose ``peaks`` hold what it saw."""

    name = "peaks"

    @staticmethod
    def pack(weight: torch.Tensor, tile: int) -> Recorded:
        return Recorded(weight)

    @staticmethod
    def linear(x, weight, bias, out):
        weight.see(x)
        return Blas.linear(x, weight.transposed, bias, out)


class Recorded:
    """A weight as :class:`PeakRecorder` multiplies with it, and the peak magnitude of each of
    its input channels over every input seen (zeros before the first)."""

    def __init__(self, weight: torch.Tensor):
        self.transposed = weight.detach().float().t()
        self.peaks = torch.zeros(weight.shape[1])

    def see(self, x: torch.Tensor) -> None:
        torch.maximum(self.peaks, x.detach().abs().amax(0), out=self.peaks)


def calibration_ids(vocab_size: int) -> torch.Tensor:
    """The calibration input of :class:`PeakRecorder`: ``CALIBRATION_SHAPE`` token ids drawn
    uniformly from the vocabulary with a fixed seed (the same for every call and process)."""
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, max(int(vocab_size), 1), CALIBRATION_SHAPE, generator=generator)


def _row_scales(x) -> torch.Tensor:
    """Per row of ``x``: its largest magnitude / 127, shape ``(rows, 1)`` (tiny for a row of
    zeros, such as the filling of the last tile, so that it quantises to zeros)."""
    peak = x.abs().amax(1, keepdim=True)  # 20x faster than vector_norm(x, inf, dim=1)
    return peak.clamp_min_(torch.finfo(torch.float32).tiny).div_(127.0)


def _scaled_sums(x, weight, out) -> tuple:
    """The exact int32 products of ``x`` (divided by the smoothing factors, where the weight
    has them) quantised per row with the int8 ``weight``, times the weight's scales, in
    ``out``; and the rows' scales (applied by the caller)."""
    quantised_weight, weight_scale, reciprocal, weight_sums, _ = weight
    quantised = scratch("input", x.shape, torch.int8)
    sums = scratch("sums", (x.shape[0], quantised_weight.shape[1]), torch.int32)
    if reciprocal is not None:  # the smoothed input, in memory of its own
        x = torch.mul(x, reciprocal, out=scratch("smoothed", x.shape, torch.float32))
    if weight_sums is None:
        row_scales = _row_scales(x)
        scaled = x.div_(row_scales) if reciprocal is not None else torch.div(x, row_scales)
        quantised.copy_(scaled.round_())
        torch._int_mm(quantised, quantised_weight, out=sums)
    else:
        row_scales, zero_points = _asymmetric_rows(x, quantised)
        torch._int_mm(quantised, quantised_weight, out=sums)
        sums.addcmul_(zero_points, weight_sums, value=-1)  # x = scale * (q - zero point)
    return torch.mul(sums, weight_scale, out=out), row_scales


def _asymmetric_rows(x, quantised) -> tuple:
    """Quantise each row of ``x`` over its own range into ``quantised`` (int8,
    ``x ~ scale * (q - zero_point)``); its ``(scale, zero point)`` per row, shapes
    ``(rows, 1)``, the zero points int32 (a row of zeros: all ``q`` equal the zero point)."""
    low = x.amin(1, keepdim=True).clamp_max_(0.0)  # zero is kept exact
    high = x.amax(1, keepdim=True).clamp_min_(0.0)
    scales = (high - low).div_(255.0).clamp_min_(torch.finfo(torch.float32).tiny)
    zero_points = torch.round(low / scales).neg_().sub_(128.0)  # low -> -128
    quantised.copy_(torch.div(x, scales).round_().add_(zero_points).clamp_(-128, 127))
    return scales, zero_points.to(torch.int32)
