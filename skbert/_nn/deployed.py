"""A fitted network as one function of padded token ids, with the estimator's last steps: what an
export (ONNX) traces."""

from __future__ import annotations

import torch
from torch import nn

from .network import SentenceEncoder, TaskNetwork

__all__ = ["FINISHES", "DeployedNetwork"]

#: What :class:`DeployedNetwork` can do after the network.
FINISHES = ("none", "l2", "softmax", "sigmoid", "affine")


class DeployedNetwork(nn.Module):
    """A fitted network from a padded batch of token ids to an estimator's output, in one forward.

    Each row of the batch is a model input (a text, or one window of a text cut into chunks);
    its output is the network's for that row alone, followed by ``finish``. The attention mask
    is passed to the encoder as it is, never tested for padding (as
    :meth:`~skbert._nn.network.SentenceEncoder.backbone_outputs` does by default), so that a
    graph traced from this module serves padded and unpadded batches of any shape. Chunks of
    one text are not pooled here: a row is one forward.

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        The fitted network, in eval mode (dropout then passes its input through).
    finish : {"none", "l2", "softmax", "sigmoid", "affine"}, default="none"
        What follows the network: nothing; unit L2 norm per row; probabilities from the
        logits (then returned before the logits themselves); or ``outputs * scale + shift``,
        per column, in float64 (as a regressor's ``predict``: a shift such as 1.7e9 would
        round every output to the same float32).
    scale, shift : array-like of shape (n_outputs,) or None, default=None
        The affine map of ``finish="affine"``.
    """

    def __init__(self, network, finish: str = "none", scale=None, shift=None):
        super().__init__()
        if finish not in FINISHES:
            raise ValueError(f"finish={finish!r} is not allowed; use one of {FINISHES}.")
        if not isinstance(network, (SentenceEncoder, TaskNetwork)):
            raise TypeError(
                f"network must be a SentenceEncoder or a TaskNetwork, not {type(network)}."
            )
        self.network = network
        self.finish = finish
        if finish == "affine":
            if scale is None or shift is None:
                raise ValueError("finish='affine' needs scale and shift.")
            self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float64))
            self.register_buffer("shift", torch.as_tensor(shift, dtype=torch.float64))

    @property
    def encoder(self) -> SentenceEncoder:
        """The encoder with its pooling."""
        return self.network.encoder if isinstance(self.network, TaskNetwork) else self.network

    @property
    def uses_token_types(self) -> bool:
        """Whether the encoder reads ``token_type_ids``."""
        return self.encoder.uses_token_types

    @property
    def n_outputs(self) -> int:
        """How many tensors :meth:`forward` returns: 2 (probabilities, logits) for a softmax
        or sigmoid finish, else 1."""
        return 2 if self.finish in ("softmax", "sigmoid") else 1

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        """A tuple of :attr:`n_outputs` tensors of shape ``(batch, width)``: the finished
        outputs (and, after probabilities, the logits they come from)."""
        encoder = self.encoder
        outputs = encoder.backbone_outputs(
            input_ids,
            attention_mask,
            token_type_ids,
            all_states=not encoder.reads_last_layer_only,
            drop_full_mask=False,
        )
        rows = encoder.read_rows(outputs, attention_mask)
        out = self.network.combine(rows)
        if self.finish == "l2":
            norms = torch.linalg.vector_norm(out, dim=-1, keepdim=True)
            return (out / norms.clamp_min(torch.finfo(out.dtype).tiny),)
        if self.finish == "softmax":
            return torch.softmax(out, dim=-1), out
        if self.finish == "sigmoid":
            return torch.sigmoid(out), out
        if self.finish == "affine":
            return (out.double() * self.scale + self.shift,)
        return (out,)
