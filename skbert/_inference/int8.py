"""Where ``precision="int8"`` runs int8 products, and why not elsewhere.

int8 inference runs on the CPU only, through the tiled layers
(:mod:`skbert._inference.cpu.tiled_layers`) with int8 products
(:mod:`skbert._inference.cpu.quantised`) on the float32 network itself: no copy of the network
is made, the quantised weights are kept with the tiled layers' plan of the encoder (made once
per version of its weights). Where int8 does not run, prediction runs float32 (the estimators
say so once, :meth:`~skbert._estimator.base.BertEstimatorBase._int8_runs`).
"""

from __future__ import annotations

import torch

from .composition import encoder_of
from .cpu.fused_int8 import FusedInt8, int8_products
from .cpu.native import INT8, source_digest
from .cpu.quantised import VNNI_FLAGS, int8_instructions, int8_products_in_torch
from .cpu.tiled_layers import has_plan

__all__ = ["int8_kind", "int8_unavailable"]


def int8_kind() -> str:
    """Which int8 products run here: ``"int8-fused-<digest>"`` (the compiled steps,
    :mod:`skbert._inference.cpu.fused_int8`, of the C source with that digest) or ``"int8"``
    (torch operations, :class:`~skbert._inference.cpu.quantised.Int8`). Their vectors differ
    in the last bits, as do those of two versions of the C source, so the feature cache keeps
    them apart (its ``precision``)."""
    products = int8_products()
    if products is FusedInt8:
        return f"{products.name}-{source_digest(INT8)}"
    return products.name


def int8_unavailable(device: torch.device, network=None) -> str | None:
    """Why ``precision="int8"`` runs float32 on ``device`` (and for ``network``, when given),
    or None where it runs int8.

    Parameters
    ----------
    device : torch.device
        Where prediction runs: int8 products run on a CPU with int8 dot-product instructions
        (:func:`~skbert._inference.cpu.quantised.int8_instructions`).
    network : SentenceEncoder or TaskNetwork, optional
        The float32 network, in eval mode: its encoder must be one the tiled layers run (its
        plan is made now, weights quantised, if it was not).

    Returns
    -------
    str or None
        The reason, as the end of a sentence.
    """
    if device.type != "cpu":
        return (
            f"int8 products run on the CPU only, and this prediction runs on {device.type!r} "
            "(set_params(precision='auto') for bf16 there)"
        )
    if not int8_products_in_torch():
        return (
            f"this torch ({torch.__version__}) has no int8 matrix product on the CPU "
            "(torch._int_mm); a newer torch has"
        )
    if int8_instructions() is None:
        flags = ", ".join(VNNI_FLAGS)
        return (
            f"this CPU has no int8 dot-product instructions that torch uses ({flags}), "
            "without which int8 products are slower than float32"
        )
    if network is not None:
        backbone = encoder_of(network).backbone
        if not has_plan(backbone, int8=True):
            return (
                f"the CPU's fast path does not run this encoder ({type(backbone).__name__} "
                "in float32)"
            )
    return None
