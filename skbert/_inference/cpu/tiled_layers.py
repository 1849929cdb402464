"""BERT-style encoder layers run over fixed-size tiles of tokens, for prediction on the CPU.

A prediction call holds rows of many lengths (:func:`~skbert._text.encoding.row_blocks` groups them
in blocks of one length, the last block of each length filled up with repeats). Every part of
a BERT layer but attention works on each token alone: the query/key/value, output and
feed-forward products, the residual sums and the layer norms. Here those parts run on the
tokens of all rows of all blocks laid end to end, cut into tiles of a fixed number of tokens
(the last tile filled up with zeros), so they compute no repeats and every product has the
same shape whatever the rows are; only attention runs per block
(:mod:`skbert._inference.cpu.attention`: a compiled kernel that attends each real row alone,
or PyTorch's kernel in the block's fixed shape, where the repeats cost little). As every
operation sees a shape that does not depend on which other texts come along, a row's states
are the same bit for bit in every call (the contract stated in
:mod:`skbert._inference.predict`). On a 2-core CPU this ran all-MiniLM-L6-v2 about 18% faster
per core than PyTorch's fused inference kernel for transformer layers on the same blocks
(measured before the compiled attention).

The path is only taken for a backbone whose structure it knows (an encoder with exact GELU of a
family in :mod:`skbert._inference.cpu.families`: the post-norm BERT, RoBERTa, MiniLM,
DistilBERT, MPNet, DeBERTa-v2/v3, ..., and the pre-norm ModernBERT with its gated GELU, rotary
positions and sliding windows), whose output it has checked against the
transformers forward on a probe input (within the tolerance of its precision), on the CPU, in
float32 or bfloat16 (the copy of the network that ``precision="bf16"`` predicts with), and
never while training: anything else runs the transformers forward block by block. The matrix
products run through :mod:`skbert._inference.cpu.products` (oneDNN with prepacked weights on AVX-512
CPUs, torch's BLAS elsewhere), or for ``precision="int8"`` (``int8=True``, on float32 weights)
through :mod:`skbert._inference.cpu.quantised`, with weights quantised once per version of
the weights (a plan of its own, kept beside the float one).
"""

from __future__ import annotations

import copy
import threading
import types
import weakref

import torch

from ..._nn.network import layer_states, weights_version
from .attention import attend_block
from .families import family_of
from .fused_int8 import int8_products
from .products import products_for_this_cpu
from .quantised import Int8, PeakRecorder, calibration_ids, float_channels

__all__ = ["has_plan", "tiled_forward"]

#: Tolerance of the check against the float32 transformers forward, relative to the states'
#: scale, by the weights' dtype: bfloat16 keeps 8 bits of mantissa (all-MiniLM-L6-v2 in
#: bfloat16 is off by up to 0.7% of the scale), while a structural mismatch, such as a wrong
#: activation or layout, is off by about the scale itself (see :func:`_agrees`).
_CHECK_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
#: The same for int8 products (float32 weights). The structure is checked on a float32 plan of
#: the same weights (above); this bound only has to catch a broken int8 product, which is off
#: by about the scale. On the probe (12 tokens of ids that are no text) all-MiniLM-L6-v2 in
#: int8 is off by up to 3.9% of the scale and all-mpnet-base-v2, twelve layers of 768, by up
#: to 18% (its sentence vectors are within cosine 0.9968 of float32's on 600 STS-B test
#: sentences; a bound of 0.1 had refused it), the tiny random test checkpoints by under 1%.
_INT8_CHECK_TOLERANCE = 0.3
#: Tokens per tile of the calibration run of int8 plans (its peaks do not depend on it).
_CALIBRATION_TILE = 64


def tiled_forward(backbone, blocks, all_states: bool, tile: int, int8: bool = False):
    """The backbone's hidden states for prediction blocks, or None where the path does not apply.

    Parameters
    ----------
    backbone : transformers.PreTrainedModel
        The encoder, in eval mode.
    blocks : list of (input_ids, token_type_ids, n_real)
        Blocks without padding: ``input_ids`` of shape ``(rows, length)``, ``token_type_ids``
        alike or None; the first ``n_real`` rows are distinct, the rest repeat them in turn
        (row ``r`` is row ``r % n_real``), as :func:`~skbert._text.encoding.row_blocks` makes them.
    all_states : bool
        Also return every layer's states (``hidden_states``), as transformers does with
        ``output_hidden_states=True``.
    tile : int
        Tokens per tile of the token-wise layers: the same in every call for the bits to be.
    int8 : bool, default=False
        Run the linear layers as int8 products (:class:`~skbert._inference.cpu.quantised.Int8`;
        float32 weights only).

    Returns
    -------
    list of types.SimpleNamespace or None
        Per block, ``last_hidden_state`` and ``hidden_states`` (None unless ``all_states``) of
        shape ``(rows, length, hidden)``, like a transformers output (the repeat rows repeat
        the states of the real ones); None when the path does not apply, the caller then runs
        the backbone itself.
    """
    if backbone.training or torch.is_grad_enabled() or not blocks:
        return None
    if any(ids.device.type != "cpu" for ids, _, _ in blocks):
        return None
    plan = _plan_for(backbone, int8)
    if plan is None:
        return None
    return plan.run(backbone, blocks, all_states, tile)


def has_plan(backbone, int8: bool = False) -> bool:
    """Whether :func:`tiled_forward` runs ``backbone`` (in eval mode) at its current weights,
    with int8 products for ``int8``: its family is known and its check passed (the plan is
    built and checked now if need be, and kept)."""
    with torch.no_grad():
        return _plan_for(backbone, int8) is not None


class _Plan:
    """The weights of every layer of one backbone, at one version of its weights, laid out for
    the tiled forward (query, key and value projections in one matrix), read through its
    ``family`` (:class:`~skbert._inference.cpu.families.Family`)."""

    def __init__(self, backbone, family, products, input_peaks=None):
        self.family = family
        self.hidden, self.heads = family.width(backbone.config)
        self.dtype = next(backbone.parameters()).dtype
        self.products = products
        self.bias = family.score_bias(backbone)
        self.rotate = family.rotation(backbone)
        self.scale = family.score_scale(backbone.config, self.hidden // self.heads)
        layers = family.layers(backbone)
        peaks = [None] * len(layers) if input_peaks is None else input_peaks
        self.layers = [
            _LayerWeights(family.parts(layer), self.products, layer_peaks)
            for layer, layer_peaks in zip(layers, peaks, strict=True)
        ]
        final = family.final_norm(backbone)
        self.final_norm = None if final is None else _norm_of(final)

    def run(self, backbone, blocks, all_states, tile):
        spans, start = [], 0  # per block: (first token, real rows, length, rows)
        for ids, _, n_real in blocks:
            rows, length = ids.shape
            spans.append((start, n_real, length, rows))
            start += n_real * length
        total = -(-start // tile) * tile
        states = torch.empty((total, self.hidden), dtype=self.dtype)
        states[start:] = 0.0  # the filling of the last tile
        for (begin, n_real, length, _), (ids, token_types, _) in zip(spans, blocks, strict=True):
            kwargs = {"input_ids": ids}
            if token_types is not None:
                kwargs["token_type_ids"] = token_types
            embedded = backbone.embeddings(**kwargs)[:n_real]
            states[begin : begin + n_real * length] = embedded.reshape(-1, self.hidden)
        inner = max(layer.inner_size for layer in self.layers)
        work = _Buffers(total, self.hidden, start, tile, inner, self.dtype)
        work.bias, work.rotate, work.scale = self.bias, self.rotate, self.scale
        every = [states] if all_states else None
        spare = None if all_states else torch.empty_like(states)
        for index, layer in enumerate(self.layers):
            target = torch.empty_like(states) if all_states else spare
            work.layer = index
            layer.run(states, target, tile, spans, self.heads, work)
            states, spare = target, states
            if every is not None:
                every.append(states)
        last = states
        if self.final_norm is not None:  # in the last of the hidden states, as transformers
            last = torch.empty_like(states) if all_states else spare
            for begin in range(0, len(states), tile):
                _norm(
                    states[begin : begin + tile], self.final_norm, last[begin : begin + tile], work
                )
        outputs = []
        for span in spans:
            block_last = _block_states(last, span)
            hidden_states = None
            if every is not None:
                hidden_states = tuple(_block_states(s, span) for s in every[:-1]) + (block_last,)
            outputs.append(
                types.SimpleNamespace(last_hidden_state=block_last, hidden_states=hidden_states)
            )
        return outputs


class _Buffers:
    """Scratch memory of one tiled forward, reused by every layer and tile (fresh memory
    for every product would cost page faults on every tile): the query/key/value projections
    and the attention output of all tokens (the filling rows set to zero), and one tile's
    intermediate states."""

    def __init__(self, total, hidden, real, tile, inner, dtype):
        self.qkv = torch.empty((total, 3 * hidden), dtype=dtype)
        self.context = torch.empty((total, hidden), dtype=dtype)
        self.context[real:] = 0.0
        self.attended = torch.empty((tile, hidden), dtype=dtype)
        self.normed = torch.empty((tile, hidden), dtype=dtype)
        self.inner = torch.empty((tile, inner), dtype=dtype)
        self.gated = torch.empty((tile, inner), dtype=dtype)
        self.result = torch.empty((tile, hidden), dtype=dtype)
        self.mean = torch.empty((tile, 1), dtype=dtype)
        self.rstd = torch.empty((tile, 1), dtype=dtype)
        # attention's extra scores (a family's score_bias, or None), its rotation of queries
        # and keys (or None), the scale of its scores, the layer running and what the extra
        # scores and rotations keep for the whole forward
        self.bias, self.rotate, self.scale, self.layer, self.memo = None, None, None, 0, {}


def _block_states(states, span):
    """``(rows, length, hidden)`` states of one block: its real rows, then the repeats."""
    begin, n_real, length, rows = span
    real = states[begin : begin + n_real * length].view(n_real, length, -1)
    return real if n_real == rows else real[torch.arange(rows) % n_real]


class _LayerWeights:
    """One layer with exact GELU as the tiled forward runs it, post-norm or pre-norm, plain or
    gated feed-forward pair, from its ``parts``
    (:class:`~skbert._inference.cpu.families.LayerParts`), its products done by ``products``
    (:mod:`skbert._inference.cpu.products`) on weights packed for the tile size. With
    ``input_peaks`` (one per weight: its inputs' peaks on the calibration input) the products
    are int8 ones quantised as :meth:`_int8_options` says."""

    def __init__(self, parts, products, input_peaks=None):
        projections = tuple(parts.projections)
        self.products = products
        self.pre_norm, self.gated = parts.pre_norm, parts.gated
        inner_weight, inner_bias = parts.inner.weight, parts.inner.bias
        if self.gated:  # the halves as two products: GELU of the first, times the second
            inner_weight = inner_weight.chunk(2)
            inner_bias = (None, None) if inner_bias is None else inner_bias.chunk(2)
        else:
            inner_weight, inner_bias = (inner_weight,), (inner_bias,)
        output_weight, self.float_tail = parts.output.weight, 0
        if input_peaks is not None:  # int8: the output product's float channels go last
            loud = float_channels(input_peaks[-1], output_weight)
            if len(loud):
                order = _last(loud, output_weight.shape[1])
                inner_weight = tuple(w[order] for w in inner_weight)
                inner_bias = tuple(None if b is None else b[order] for b in inner_bias)
                output_weight = output_weight[:, order]
                input_peaks = (*input_peaks[:-1], input_peaks[-1][order])
                self.float_tail = len(loud)
        self.weights = (  # as nn.Linear holds them: (out, in)
            torch.cat([p.weight for p in projections]),
            parts.attention_output.weight,
            *inner_weight,
            output_weight,
        )
        biases = [p.bias for p in projections]
        self.biases = (
            None if biases[0] is None else torch.cat(biases),
            parts.attention_output.bias,
            *inner_bias,
            parts.output.bias,
        )
        self.inner_size = parts.output.weight.shape[1]
        first = parts.attention_norm
        self.norms = (None if first is None else _norm_of(first), _norm_of(parts.output_norm))
        self.input_peaks = input_peaks
        self._packed = {}  # tile -> the weights packed for it (the latest tile size only)
        self._lock = threading.Lock()

    def packed(self, tile: int) -> tuple:
        """The weights laid out for products on ``tile`` tokens (kept for the next call
        with the same tile size)."""
        with self._lock:
            packed = self._packed.get(tile)
            if packed is None:
                pack, options = self.products.pack, self._int8_options()
                if options is None:
                    packed = tuple(pack(w, tile) for w in self.weights)
                else:
                    packed = tuple(
                        pack(w, tile, **o) for w, o in zip(self.weights, options, strict=True)
                    )
                self._packed = {tile: packed}
            return packed

    def _int8_options(self):
        """Per weight, how :meth:`Int8.pack <skbert._inference.cpu.quantised.Int8.pack>`
        quantises it (None for float products): the products that read a norm's output (the
        query/key/value projection, the feed-forward pair's first) are smoothed by their
        inputs' calibration peaks; the feed-forward pair's second, which reads GELU's outputs
        (mostly positive), quantises its inputs asymmetrically. Measured on all-MiniLM-L6-v2
        over the 2,758 STS-B test sentences (the worst text's cosine to float32): plain int8
        0.9818, every product smoothed 0.9882, the choice here 0.9954; smoothing the
        attention output or the second product as well did worse. The second product's
        loudest input channels (:func:`~skbert._inference.cpu.quantised.float_channels`), moved
        last in the inner states by ``__init__``, stay in float32 (``float_tail``): on
        all-mpnet-base-v2 the STS-B test sentence that was worst went from 0.966 to 0.998, and
        the worst of the 2,758 is now at 0.9919 (MiniLM's at 0.9957). Measured
        while choosing, on 600 of those sentences: quantising the inputs in 8 groups of
        channels, each with its own scale, did as well only with a weight scale per group
        too, at the cost of 8 products instead of 1."""
        if self.input_peaks is None:
            return None
        last = len(self.weights) - 1
        return tuple(
            {
                "input_peaks": None if index in (1, last) else peaks,
                "asymmetric": index == last,
                "float_tail": self.float_tail if index == last else 0,
            }
            for index, peaks in enumerate(self.input_peaks)
        )

    def run(self, states, target, tile, spans, heads, work):
        """Write the layer's output states for the input ``states`` into ``target`` (both of
        shape ``(tokens, hidden)``: the tokens of ``spans``, then the filling), tile by tile."""
        products = self.products
        packed = self.packed(tile)
        qkv_weight, out_weight = packed[0], packed[1]
        qkv_bias, out_bias = self.biases[0], self.biases[1]
        first_norm, second_norm = self.norms
        qkv, context, normed = work.qkv, work.context, work.normed
        for begin in range(0, len(states), tile):
            end = begin + tile
            source = states[begin:end]
            if self.pre_norm and first_norm is not None:
                source = _norm(source, first_norm, normed, work)
            products.linear(source, qkv_weight, qkv_bias, qkv[begin:end])
        for begin, n_real, length, rows in spans:
            end = begin + n_real * length
            attend_block(qkv[begin:end], context[begin:end], n_real, rows, length, heads, work)
        norms_fused = not self.pre_norm and hasattr(products, "linear_add_norm")
        for begin in range(0, len(states), tile):
            end = begin + tile
            output = target[begin:end]
            if norms_fused:  # the post-norm layer below, each norm in its product's last pass
                products.linear_add_norm(
                    context[begin:end], states[begin:end], out_weight, out_bias, first_norm,
                    normed,
                )  # fmt: skip
                self._feed_forward(normed, normed, packed, work, output, second_norm)
                continue
            attended = products.linear_add(
                context[begin:end], states[begin:end], out_weight, out_bias, work.attended
            )
            if self.pre_norm:  # x + attention, then + the feed-forward pair of its norm
                normed_attended = _norm(attended, second_norm, normed, work)
                result = self._feed_forward(normed_attended, attended, packed, work, output)
                if result is not output:
                    output.copy_(result)
            else:  # the norm of x + attention, then the norm of that + its feed-forward pair
                _norm(attended, first_norm, normed, work)
                result = self._feed_forward(normed, normed, packed, work, work.result)
                _norm(result, second_norm, output, work)

    def _feed_forward(self, normed, residual, packed, work, out, norm=None):
        """The feed-forward pair of one tile plus ``residual``, in ``out`` (or returned in
        memory of the products' own): in one call where the products fuse a plain pair
        (``feed_forward``: :class:`~skbert._inference.cpu.fused_int8.FusedInt8`), else
        the inner states (:meth:`_inner`), then the output product. With ``norm`` (products
        that fuse it only: ``linear_add_norm``), the layer norm of that sum, in ``out``."""
        products = self.products
        if not self.gated and hasattr(products, "feed_forward"):
            return products.feed_forward(
                normed, packed[2], self.biases[2], packed[-1], self.biases[-1], residual,
                work.inner, out, norm,
            )  # fmt: skip
        inner = self._inner(normed, packed, work)
        if norm is not None:
            return products.linear_add_norm(inner, residual, packed[-1], self.biases[-1], norm, out)
        return products.linear_add(inner, residual, packed[-1], self.biases[-1], out)

    def _inner(self, normed, packed, work):
        """The feed-forward pair's inner states of one tile: GELU of its product, or (gated)
        GELU of the first half times the second."""
        products = self.products
        if not self.gated:
            return products.linear_gelu(normed, packed[2], self.biases[2], work.inner)
        gelu = products.linear_gelu(normed, packed[2], self.biases[2], work.inner)
        return products.linear_mul(normed, gelu, packed[3], self.biases[3], work.gated)


def _last(channels: torch.Tensor, size: int) -> torch.Tensor:
    """An order of ``size`` channels that keeps the others in order and puts ``channels``
    last."""
    keep = torch.ones(size, dtype=torch.bool)
    keep[channels] = False
    return torch.cat([keep.nonzero().flatten(), channels])


def _norm_of(norm) -> tuple:
    """``(weight, bias or None, eps)`` of an ``nn.LayerNorm``."""
    return norm.weight, norm.bias, norm.eps


def _norm(x, norm, out, work):
    """The layer norm ``norm`` (:func:`_norm_of`) of the tile ``x``, written into ``out``
    (returned)."""
    weight, bias, eps = norm
    _layer_norm(x, (x.shape[1],), weight, bias, eps, out0=out, out1=work.mean, out2=work.rstd)
    return out


_layer_norm = torch.ops.aten.native_layer_norm.out  # F.layer_norm into given memory, same bits


def _eligible(backbone, int8: bool = False):
    """The family of ``backbone`` (:func:`~skbert._inference.cpu.families.family_of`) when
    its weights are all float32 or all bfloat16 (float32 for ``int8``), else None."""
    family = family_of(backbone)
    if family is None:
        return None
    dtypes = {p.dtype for p in backbone.parameters()}
    allowed = [{torch.float32}] if int8 else [{torch.float32}, {torch.bfloat16}]
    return family if dtypes in allowed else None


def _signature(backbone):
    """:func:`~skbert._nn.network.weights_version` of ``backbone``: the plan is rebuilt when
    it changes."""
    return weights_version(backbone)


def _agrees(backbone, plan) -> bool:
    """The tiled path's states match the transformers forward's on a small probe block.

    In float32 every layer's states must be within 1e-4 of the scale. A bfloat16 plan is
    checked twice against the float32 forward of a float32 copy of the same weights (exact:
    every bfloat16 value is a float32 one): the same plan run in float32 must pass the float32
    check (the structure: what a small difference could hide among bfloat16 rounding), and its
    bfloat16 states must be no further from float32 than 2e-2 of the scale or, where
    transformers' own bfloat16 forward drifts further (deep models: a 22-layer ModernBERT drifts
    by 3-4 %), than 1.25 times that drift. An int8 plan (on float32 weights) must be within
    ``_INT8_CHECK_TOLERANCE`` of the float32 forward, and a float32 plan of the same weights
    must pass the float32 check.
    """
    vocab = getattr(backbone.config, "vocab_size", 100) or 100
    length = plan.family.probe_length(backbone.config)
    probe = (torch.arange(2 * length).reshape(2, length) * 7 + 3) % vocab
    reference = _states(backbone, probe)
    tiled = plan.run(backbone, [(probe, None, len(probe))], True, 16)[0].hidden_states
    if issubclass(plan.products, Int8):  # float32 weights: the structure on a float32 plan of them
        errors = _errors(reference, tiled)
        if not all(error <= _INT8_CHECK_TOLERANCE for error in errors):
            return False
        plan = _Plan(backbone, plan.family, products_for_this_cpu())
        tiled = plan.run(backbone, [(probe, None, len(probe))], True, 16)[0].hidden_states
    if plan.dtype == torch.float32:
        return all(error <= _CHECK_TOLERANCE[torch.float32] for error in _errors(reference, tiled))
    exact = copy.deepcopy(backbone).float()
    exact_states = _states(exact, probe)
    exact_plan = _Plan(exact, plan.family, plan.products)
    exact_tiled = exact_plan.run(exact, [(probe, None, len(probe))], True, 16)
    structure = _errors(exact_states, exact_tiled[0].hidden_states)
    if not all(error <= _CHECK_TOLERANCE[torch.float32] for error in structure):
        return False
    tolerance = _CHECK_TOLERANCE[plan.dtype]
    drifts = _errors(exact_states, reference)
    return all(
        error <= max(tolerance, 1.25 * drift)
        for error, drift in zip(_errors(exact_states, tiled), drifts, strict=True)
    )


def _input_peaks(backbone, family) -> list:
    """Per layer, per weight: the largest magnitude of each input channel of its product on
    the calibration input (:func:`~skbert._inference.cpu.quantised.calibration_ids`), run in
    float32 through a plan of :class:`~skbert._inference.cpu.quantised.PeakRecorder`
    products: what smooths the int8 products (:mod:`skbert._inference.cpu.quantised`)."""
    ids = calibration_ids(getattr(backbone.config, "vocab_size", 100) or 100)
    recorder = _Plan(backbone, family, PeakRecorder)
    with torch.no_grad():
        recorder.run(backbone, [(ids, None, len(ids))], False, _CALIBRATION_TILE)
    return [
        tuple(weight.peaks for weight in layer.packed(_CALIBRATION_TILE))
        for layer in recorder.layers
    ]


def _states(backbone, probe):
    """transformers' states of ``probe``, every layer's (:func:`layer_states`)."""
    return layer_states(backbone(input_ids=probe, output_hidden_states=True, return_dict=True))


def _errors(expected_states, got_states):
    """Per layer, the largest difference relative to the expected states' scale (inf where
    the shapes or the number of layers differ)."""
    if len(expected_states) != len(got_states):
        return [float("inf")]
    errors = []
    for expected, got in zip(expected_states, got_states, strict=True):
        expected, got = expected.float(), got.float()
        if expected.shape != got.shape:
            return [float("inf")]
        scale = float(expected.abs().max()) or 1.0
        errors.append(float((expected - got).abs().max()) / scale)
    return errors


_PLANS = weakref.WeakKeyDictionary()  # backbone -> (signature, plan or None)
_INT8_PLANS = weakref.WeakKeyDictionary()  # the same, with int8 products
_LOCK = threading.Lock()


def _plan_for(backbone, int8: bool = False):
    """The cached plan of ``backbone`` (with int8 products for ``int8``), rebuilt (and
    checked) when its weights changed."""
    plans = _INT8_PLANS if int8 else _PLANS
    with _LOCK:
        signature = _signature(backbone)
        if signature is None:  # changes to the weights could not be seen: no cached plan
            return None
        cached = plans.get(backbone)
        if cached is not None and cached[0] == signature:
            return cached[1]
        plan = None
        family = _eligible(backbone, int8)
        if family is not None:
            if int8:
                candidate = _Plan(backbone, family, int8_products(), _input_peaks(backbone, family))
            else:
                candidate = _Plan(backbone, family, products_for_this_cpu())
            plan = candidate if _agrees(backbone, candidate) else None
        plans[backbone] = (signature, plan)
        return plan
