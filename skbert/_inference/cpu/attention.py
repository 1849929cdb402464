"""Attention of one block of the tiled layers (:mod:`skbert._inference.cpu.tiled_layers`), on
the CPU: the compiled kernel of ``attention_kernel.c`` where the family's scores are plain
scaled dot products, else PyTorch's ``scaled_dot_product_attention``.

Prediction blocks are short (rows of one length; the STS-B test sentences have 5 to 46 tokens
with all-MiniLM-L6-v2's tokenizer, 12 at the median), and PyTorch's CPU attention kernel spends
most of its time on them outside the arithmetic. The
compiled kernel (:mod:`skbert._inference.cpu.native`) computes each row and head in one pass
with its scores in cache, and only the block's real rows (PyTorch's kernel also attends the
repeats that fill a block up to its fixed shape). Measured on a 2-core AMD EPYC (Zen 4,
AVX-512), one thread, against PyTorch's kernel with the copy of its output into the tokens'
order, both through :func:`attend_block`: 12 heads of 32 (all-MiniLM-L6-v2), 32 rows of 16
tokens 0.30 ms vs 0.89 ms (2.95x), 16 rows of 32 tokens 2.19x, 8 rows of 64 tokens 1.80x, one
row of 512 tokens 1.15x; 12 heads of 64 (BERT-base's width), 2.13x, 1.35x, 1.37x and 1.07x.
The whole ``transform`` of the 2,758 STS-B test sentences (2 cores) ran 1.08x as fast in
float32, 1.06x in bfloat16 and 1.15x in int8 as with PyTorch's kernel.

Each row's output depends on its own projections alone, through the same instructions for a
given length and head size, so a text gets the same bits in every call (the contract of
:mod:`skbert._inference.predict`). Its outputs differ from PyTorch's kernel's in the last bits
(``exp`` is a polynomial within 2 ulp; the sums run in another order): the feature cache keeps
the two apart, and two versions of the kernel (:func:`attention_kind`).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from .native import ATTENTION, attention_kernel, source_digest
from .scratch import scratch

__all__ = ["attend_block", "attention_kind"]

#: The largest head size the compiled kernel computes (``MAX_HEAD`` of the C source).
MAX_HEAD = 128


def attention_kind() -> str:
    """``"compiled-<digest>"`` where the compiled kernel (of the C source with that digest)
    loads, else ``"torch"``: the tiled layers' vectors differ between the two, and between
    two versions of the C source, in the last bits."""
    if attention_kernel() is None:
        return "torch"
    return f"compiled-{source_digest(ATTENTION)}"


def attend_block(qkv, context, n_real, rows, length, heads, work) -> None:
    """Attention of one block, written into ``context``.

    Parameters
    ----------
    qkv : torch.Tensor
        ``(n_real * length, 3 * hidden)``: the query, key and value projections of the block's
        real rows' tokens, row after row (heads side by side in each third).
    context : torch.Tensor
        ``(n_real * length, hidden)``, written: each token's attention output, heads side by
        side.
    n_real, rows, length, heads : int
        The block's real rows, its rows with the repeats that fill it up (PyTorch's kernel
        attends in that fixed shape), its tokens per row and the layer's heads.
    work : skbert._inference.cpu.tiled_layers._Buffers
        The forward's scratch: ``bias`` (a family's extra scores, or None), ``rotate`` (its
        rotation of queries and keys, or None), ``scale`` (of the scores; None for
        ``1 / sqrt(head size)``), ``layer`` and ``memo``.
    """
    size = qkv.shape[1] // (3 * heads)
    if work.bias is None and work.rotate is None and size <= MAX_HEAD:
        kernel = attention_kernel()
        if kernel is not None:
            scale = size**-0.5 if work.scale is None else work.scale
            _compiled(kernel, qkv, context, n_real, length, heads, size, scale)
            return
    part = qkv.view(n_real, length, 3, heads, size)
    if n_real < rows:  # attention in the block's fixed shape, repeats included
        part = part[torch.arange(rows) % n_real]
    out = context.view(n_real, length, heads, size)
    out.copy_(_sdpa(part, work, length)[:n_real].transpose(1, 2))


def _compiled(kernel, qkv, context, n_real, length, heads, size, scale) -> None:
    """The compiled kernel on float32 memory (bfloat16 projections read as float32, as
    :func:`_sdpa` does, and the outputs rounded back), its scores scaled by ``scale`` (the
    family's: DeBERTa-v2's divides by more than the head size's root)."""
    source, target = qkv, context
    if qkv.dtype != torch.float32:
        source = _memory("attention_input", qkv.shape).copy_(qkv)
    if context.dtype != torch.float32:
        target = _memory("attention_output", context.shape)
    work = _memory("attention_work", (kernel.attend_scratch(length, size) // 4,))
    failed = kernel.attend(
        source.data_ptr(), n_real, length, heads, size, scale, target.data_ptr(),
        work.data_ptr(),
    )  # fmt: skip
    if failed:  # the sizes were checked above
        raise RuntimeError(f"the compiled attention refused heads of {size} ({failed})")
    if target is not context:
        context.copy_(target)


def _memory(name, shape) -> torch.Tensor:
    """float32 scratch of ``shape``, a view of this thread's array for ``name`` of the next
    power of two of elements (blocks come in many shapes: this keeps a few arrays)."""
    size = max(1, math.prod(shape))
    return scratch(name, (1 << (size - 1).bit_length(),))[:size].view(shape)


def _sdpa(part, work, length):
    """PyTorch's attention of one block from its ``(rows, length, 3, heads, head size)``
    projections: ``(rows, heads, length, head size)``. Where the family rotates queries and
    keys (``work.rotate``: ModernBERT's rotary positions), that comes first; where it adds to
    the scores (``work.bias``: MPNet's relative positions, DeBERTa's disentangled scores,
    ModernBERT's sliding window), that is added to the scores scaled by ``work.scale``.
    bfloat16 projections are attended in float32: on a 2-core AVX512-BF16 EPYC, PyTorch's CPU
    attention kernel is slower in bfloat16 than the cast and float32 kernel (the bf16
    ``transform`` of the 2,758 STS-B test sentences took 2.74 s with bfloat16 attention,
    2.58 s with this), and float32 is the more accurate."""
    if part.dtype != torch.float32:
        part = part.float()
    query, key, value = part.permute(2, 0, 3, 1, 4).unbind(0)
    if work.bias is None and work.rotate is None:
        # PyTorch's default scale (None: 1 / sqrt(head size)) as before, bit for bit
        plain = work.scale is None or work.scale == query.shape[-1] ** -0.5
        return F.scaled_dot_product_attention(
            query, key, value, scale=None if plain else work.scale
        )
    if work.rotate is not None:
        query, key = work.rotate(work.layer, query, key, length, work.memo)
    extra = None if work.bias is None else work.bias(work.layer, query, key, length, work.memo)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=extra, scale=work.scale)
