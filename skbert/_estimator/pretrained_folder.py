"""The folder :func:`skbert.pretraining.further_pretrain` writes: the masked-LM model, with the
source model's pooler and sentence-transformers pipeline, and its tokenizer."""

from __future__ import annotations

import os

from .._nn.backbone import UNTRAINED_POOLER, copy_sentence_pipeline, quiet_loading
from .model_source import fitted_encoder_source, load_encoder

__all__ = ["write_pretrained"]


def write_pretrained(model, mlm, tokenizer, output_dir) -> None:
    """Write the pre-trained ``mlm`` and its ``tokenizer`` to ``output_dir``, with the pooler
    and the sentence pipeline (pooling, Normalize) of the checkpoint ``model`` stands for."""
    state = {**mlm.to("cpu").state_dict(), **source_pooler(model, mlm.base_model_prefix)}
    with quiet_loading():
        mlm.save_pretrained(output_dir, state_dict=state)
        tokenizer.save_pretrained(output_dir)
    source = model
    while (fitted := fitted_encoder_source(source)) is not None:
        source = fitted.model  # the checkpoint a fitted estimator was fitted from
    if not copy_sentence_pipeline(source, output_dir):  # its pooling and Normalize
        stale = os.path.join(output_dir, "modules.json")  # of what was written there before
        if os.path.isfile(stale):
            os.remove(stale)


def source_pooler(model, prefix: str) -> dict:
    """The trained pooler weights of ``model`` (none if it has none), named as in a masked-LM
    checkpoint of ``prefix`` (``"bert"``, ...): the masked-LM model has no pooler, so
    without them the written checkpoint would lose the pooler that ``pooling="pooler"``
    reads (masked-LM training does not change it)."""
    _, backbone = load_encoder(model)
    if getattr(backbone, UNTRAINED_POOLER, False):
        return {}
    return {
        f"{prefix}.{name}": value
        for name, value in backbone.state_dict().items()
        if name.startswith("pooler")
    }
