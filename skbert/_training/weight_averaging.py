"""Weight-space ensembling of a fine-tuned network with the weights it started from (WiSE-FT).

Wortsman et al. (2022) average, weight by weight, a fine-tuned network with the pre-trained
one it started from: ``(1 - alpha) * start + alpha * fine_tuned``. With few training texts, a
fine-tuned encoder drifts from what pre-training taught it; the average keeps part of it
(:class:`~skbert.BertSentenceTransformer`'s ``wise_alpha``).

:class:`StartingWeights` copies the weights before training (only those that training may
change and that existed before it: the pre-trained encoder's, not new layers on top, whose
starting weights are random) and :meth:`StartingWeights.blend_into` averages them into the
trained network in place.
"""

from __future__ import annotations

import torch

__all__ = ["StartingWeights"]


class StartingWeights:
    """A copy of a module's weights before training, to average back into it afterwards.

    Parameters
    ----------
    module : torch.nn.Module
        The network about to train (its parameters are copied, on the CPU).
    prefix : str or tuple of str, default=""
        Only the parameters whose names start with it (or one of them: e.g. the pre-trained
        backbone's).
    """

    def __init__(self, module: torch.nn.Module, prefix: str | tuple = "") -> None:
        self.weights = {
            name: param.detach().to("cpu", copy=True)
            for name, param in module.named_parameters()
            if name.startswith(prefix)
        }

    def blend_into(self, module: torch.nn.Module, alpha: float) -> int:
        """Set each copied weight of ``module`` to ``(1 - alpha) * start + alpha * trained``.

        Parameters
        ----------
        module : torch.nn.Module
            The trained network (the one copied, or a network of the same parameter names).
        alpha : float
            The trained weights' share, in [0, 1]: 1 keeps them, 0 restores the start.

        Returns
        -------
        int
            How many parameter tensors were averaged.

        Raises
        ------
        ValueError
            If ``alpha`` is outside [0, 1], or a copied weight is missing from ``module`` or
            has another shape.
        """
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha!r}.")
        params = dict(module.named_parameters())
        for name, start in self.weights.items():
            if name not in params or params[name].shape != start.shape:
                found = "missing" if name not in params else tuple(params[name].shape)
                raise ValueError(
                    f"the trained network does not match its starting weights: {name!r} "
                    f"was {tuple(start.shape)}, now {found}."
                )
        if alpha == 1.0:
            return 0
        with torch.no_grad():
            for name, start in self.weights.items():  # alpha 0 gives the start exactly
                param = params[name]
                param.mul_(alpha).add_(start.to(param.device, param.dtype), alpha=1 - alpha)
        return len(self.weights)
