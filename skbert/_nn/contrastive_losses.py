"""The losses of contrastive fine-tuning: on labelled pairs, and over every pair of a batch.

* :func:`cosine_pair_loss`: SetFit's default (sentence-transformers' ``CosineSimilarityLoss``),
  the mean squared error between cos(u, v) and the pair's target, 1 for a positive pair and 0
  for a negative.
* :func:`batch_cosine_loss`: the same squared error over every pair of texts of a batch,
  positive and negative pairs weighted equally (a batch of ``b`` texts trains ``b(b-1)/2``
  pairs for the cost of encoding ``b`` texts).
* :func:`batch_cosent_loss`: CoSENT (Su 2022) over every pair of a batch: each positive pair's
  cosine ranked above each negative pair's, with no target value for either.
* :func:`supervised_contrastive_loss`: Khosla et al. (2020)'s supervised contrastive loss over
  a batch of texts, in which every text of a shared label is a positive of each other and
  every other text a negative.
* :func:`batch_hard_triplet_loss`: the batch-hard soft-margin triplet loss (Hermans et al.
  2017; sentence-transformers' ``BatchHardSoftMarginTripletLoss``): each text's farthest
  positive pulled closer than its nearest negative.

All take float32 vectors (the caller casts the encoder's output) and return a scalar mean.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "CONTRASTIVE_LOSSES",
    "batch_cosent_loss",
    "batch_cosine_loss",
    "batch_hard_triplet_loss",
    "cosine_pair_loss",
    "gather_rows",
    "supervised_contrastive_loss",
]

#: ``contrastive_loss`` names and what they train on
CONTRASTIVE_LOSSES = {
    "cosine": "pairs: mean squared error of cos(u, v) against 1 (same label) or 0",
    "batch-cosine": "batches of texts: the same squared error over every pair, balanced",
    "cosent": "batches of texts: CoSENT ranking of every positive pair above every negative",
    "supcon": "batches of texts: supervised contrastive loss (Khosla et al. 2020)",
    "batch-hard-triplet": "batches of texts: each text's farthest positive nearer than its "
    "nearest negative (Hermans et al. 2017, soft margin)",
}


def cosine_pair_loss(u: torch.Tensor, v: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error between cos(u, v) and ``target`` (SetFit's CosineSimilarityLoss).

    Parameters
    ----------
    u, v : torch.Tensor of shape (n_pairs, dim)
        The vectors of the two sides of each pair.
    target : torch.Tensor of shape (n_pairs,)
        1.0 for a positive pair, 0.0 for a negative.

    Returns
    -------
    torch.Tensor
        The scalar loss.
    """
    return F.mse_loss(F.cosine_similarity(u, v, dim=-1), target)


def gather_rows(z: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``z[index]`` (the vectors of a batch's pairs, a text in several) as a one-hot product.

    The same rows bit for bit, but a backward with a fixed order: that of the index gather adds
    a text's gradients from its pairs in an order that varies with the threads once a batch
    is large (seen on 2 threads at 128 pairs of 384-d vectors, not at 16), so that two fits
    of one seed differed in the last bits.

    Parameters
    ----------
    z : torch.Tensor of shape (n_texts, dim)
    index : torch.Tensor of shape (n,), int64

    Returns
    -------
    torch.Tensor of shape (n, dim)
    """
    return F.one_hot(index, len(z)).to(z.dtype) @ z


def _every_pair(z: torch.Tensor, positives: torch.Tensor) -> tuple:
    """``(unit z, cos, same, different)`` of a batch: ``cos`` the matrix of the texts' cosines,
    ``same`` and ``different`` the masks of its unordered positive and negative pairs (the upper
    triangle, each pair counted once).

    The pairs are read through masks of the matrix, not gathered by index: the backward of an
    index gather adds each text's many pair gradients in an order that varies with the threads,
    so two fits of one seed would differ in the last bits; the masked sums do not.
    """
    z = F.normalize(z, dim=-1)
    upper = torch.ones(len(z), len(z), dtype=torch.bool, device=z.device).triu(1)
    return z, z @ z.T, positives & upper, ~positives & upper


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return values.masked_fill(~mask, 0.0).sum() / mask.sum()


def _masked_logsumexp(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(values.masked_fill(~mask, float("-inf")).flatten(), 0)


def batch_cosine_loss(z: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """The cosine pair loss over every pair of a batch, positives and negatives weighed alike.

    ``0.5 * mean over positive pairs of (cos - 1)^2 + 0.5 * mean over negative pairs of
    cos^2``, each unordered pair counted once: the mean squared error of
    :func:`cosine_pair_loss` on a balanced set of the batch's pairs (SetFit's pairs are half
    positive, half negative). Where the batch has pairs of one kind only, their mean.

    Parameters
    ----------
    z : torch.Tensor of shape (n_texts, dim)
        The texts' vectors.
    positives : torch.Tensor of shape (n_texts, n_texts), bool
        True where two texts share a label; the diagonal is ignored.

    Returns
    -------
    torch.Tensor
        The scalar loss; 0 (with a gradient) for a batch of fewer than 2 texts. Its value
        and gradient are repeatable bit for bit at a given number of threads.
    """
    z, cos, same, different = _every_pair(z, positives)
    parts = [_masked_mean((cos - 1.0) ** 2, same)] if bool(same.any()) else []
    if bool(different.any()):
        parts.append(_masked_mean(cos**2, different))
    if not parts:
        return (z * 0.0).sum()
    return sum(parts) / len(parts)


def batch_cosent_loss(z: torch.Tensor, positives: torch.Tensor, scale: float) -> torch.Tensor:
    """CoSENT (Su 2022) over every pair of a batch: positive pairs ranked above negative ones.

    ``log(1 + sum over positive pairs p and negative pairs q of exp(scale * (cos_q -
    cos_p)))``, each unordered pair of texts counted once; computed as
    ``softplus(logsumexp(scale * cos_q) + logsumexp(-scale * cos_p))``, linear in the pairs.
    Unlike :func:`batch_cosine_loss` it sets no target cosine: a batch whose every positive
    pair is well above every negative one adds little to the gradient.

    Parameters
    ----------
    z, positives : torch.Tensor
        As in :func:`batch_cosine_loss`.
    scale : float
        Multiplies the cosine differences (CoSENT: 20).

    Returns
    -------
    torch.Tensor
        The scalar loss; 0 (with a gradient) when the batch lacks a positive or a negative pair.
    """
    z, cos, same, different = _every_pair(z, positives)
    if not bool(same.any()) or not bool(different.any()):
        return (z * 0.0).sum()
    cos = cos * scale
    return F.softplus(_masked_logsumexp(cos, different) + _masked_logsumexp(-cos, same))


def supervised_contrastive_loss(
    z: torch.Tensor, positives: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Khosla et al. (2020)'s supervised contrastive loss (their L_out) over one batch.

    For each text i with at least one positive, with ``s = cos(z_i, z_j) / temperature``:
    ``-mean over positives p of log(exp(s_ip) / sum over j != i of exp(s_ij))``; the loss is
    the mean over those texts. A text without a positive in the batch only serves as a
    negative of the others.

    Parameters
    ----------
    z : torch.Tensor of shape (n_texts, dim)
        The texts' vectors (normalised here).
    positives : torch.Tensor of shape (n_texts, n_texts), bool
        True where two texts share a label; the diagonal is ignored.
    temperature : float
        Divides the cosine similarities (Khosla et al.: 0.1; lower sharpens).

    Returns
    -------
    torch.Tensor
        The scalar loss; 0 (with a gradient) when no text of the batch has a positive.
    """
    z = F.normalize(z, dim=-1)
    logits = z @ z.T / temperature
    self_pair = torch.eye(len(z), dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_pair, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    positives = positives & ~self_pair
    n_pos = positives.sum(dim=1)
    anchors = n_pos > 0
    if not bool(anchors.any()):
        return (z * 0.0).sum()
    pos_log_prob = log_prob.masked_fill(~positives, 0.0).sum(dim=1)
    return -(pos_log_prob[anchors] / n_pos[anchors]).mean()


def batch_hard_triplet_loss(z: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """The batch-hard triplet loss with a soft margin (Hermans et al. 2017) over one batch.

    With ``d`` the Euclidean distance of the unit vectors (``sqrt(2 - 2 cos)``), for each
    text ``a`` with at least one positive and one negative in the batch: ``softplus(max over
    positives p of d(a, p) - min over negatives n of d(a, n))``, the hardest triplet of
    each anchor; the loss is the mean over those texts (sentence-transformers'
    ``BatchHardSoftMarginTripletLoss`` on normalised vectors). The soft margin sets no margin
    to choose: a triplet keeps a small pull however far apart it already is.

    Parameters
    ----------
    z, positives : torch.Tensor
        As in :func:`supervised_contrastive_loss`.

    Returns
    -------
    torch.Tensor
        The scalar loss; 0 (with a gradient) when no text of the batch has both a positive and
        a negative.
    """
    z = F.normalize(z, dim=-1)
    # clamped away from 0: two equal vectors (a text twice) have an infinite sqrt gradient
    distance = (2.0 - 2.0 * (z @ z.T)).clamp_min(1e-12).sqrt()
    self_pair = torch.eye(len(z), dtype=torch.bool, device=z.device)
    same = positives & ~self_pair
    different = ~positives & ~self_pair
    anchors = same.any(dim=1) & different.any(dim=1)
    if not bool(anchors.any()):
        return (z * 0.0).sum()
    hardest_positive = distance.masked_fill(~same, float("-inf")).amax(dim=1)
    hardest_negative = distance.masked_fill(~different, float("inf")).amin(dim=1)
    return F.softplus(hardest_positive - hardest_negative)[anchors].mean()
