"""What a network costs: the matrix-product FLOPs per token of its encoder.

The estimators (:mod:`skbert._estimator.base`) and :mod:`skbert.pretraining` hand it to
:func:`~skbert._core.devices.resolve_precision` (``precision="auto"`` trains a model cheaper
than BERT-base in fp32 on CUDA); the prediction path (:mod:`skbert._inference.predict`) sizes
its blocks by it.
"""

from __future__ import annotations

__all__ = ["training_flops"]


def training_flops(network) -> int | None:
    """Matrix-product FLOPs per token of ``network``'s encoder (its ``backbone``, or itself),
    from its config; None when the config does not say."""
    backbone = getattr(network, "backbone", network)
    config = getattr(backbone, "config", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "dim", None)
    inner = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", None)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", None)
    if not all(isinstance(v, int) and v > 0 for v in (hidden, inner, layers)):
        return None
    return 2 * layers * (4 * hidden * hidden + 2 * hidden * inner)
