"""The contrastive objective of :class:`~skbert.BertSentenceTransformer` (SetFit-style).

Few-shot text classification as SetFit (Tunstall et al. 2022) does it: fine-tune the sentence
encoder so that texts of the same label have similar vectors and texts of different labels
dissimilar ones, then fit any scikit-learn classifier on the vectors (the next step of a
``Pipeline``). Here are the parts of that fit which the estimator hands to the training loop:
how each epoch's batches are drawn (:mod:`skbert._training.pair_sampling`, streamed) and the
loss of a batch (:mod:`skbert._nn.contrastive_losses`).
"""

from __future__ import annotations

import numpy as np
import torch

from .._core.devices import full_precision
from .._core.launch import current_share
from .._nn.contrastive_losses import (
    batch_cosent_loss,
    batch_cosine_loss,
    batch_hard_triplet_loss,
    cosine_pair_loss,
    gather_rows,
    supervised_contrastive_loss,
)
from .._training.pair_sampling import BalancedTextSampler, PairSampler
from .parameter_docs import numpydoc_entries

__all__ = [
    "refuse_split_batches",
    "AUTO_FULL_RATE_STEPS",
    "AUTO_LEARNING_RATE",
    "AUTO_PAIRS_PER_TEXT",
    "AUTO_RATE_REFERENCE_SIZE",
    "CONTRASTIVE_PARAMETERS",
    "auto_learning_rate",
    "contrastive_training",
    "in_batch_steps",
    "label_codes",
    "pairs_per_text",
    "training_config",
]

#: ``pairs_per_text="auto"`` per ``contrastive_loss``: SetFit's ``num_iterations`` for its
#: pair loss; for the in-batch losses, batches per text when the batches are full (measured
#: on held-out training texts of SST-2 and TREC, 16 per class: benchmarks/README.md)
AUTO_PAIRS_PER_TEXT = {
    "cosine": 20,
    "batch-cosine": 30,
    "supcon": 30,
    "cosent": 30,
    "batch-hard-triplet": 30,
}

#: ``learning_rate="auto"`` of :class:`~skbert.BertSentenceTransformer`: SBERT's 2e-5, except
#: for the in-batch contrastive losses (see :func:`auto_learning_rate`), whose epoch has
#: ``pairs_per_text * n / batch_size`` steps, each training every pair of its batch: 1e-4 for
#: an epoch of up to ``AUTO_FULL_RATE_STEPS`` steps, lowered in proportion to the steps
#: beyond, down to 2e-5 (measured on SST-2's dev set, 8 to 64 texts per class:
#: benchmarks/README.md)
AUTO_LEARNING_RATE = {"default": 2e-5, "in-batch": 1e-4}
AUTO_FULL_RATE_STEPS = 24
#: the encoder those in-batch rates were measured on, as layers x width: all-MiniLM-L6-v2's
#: 6 x 384. A larger encoder's rate is lowered in proportion (all-mpnet-base-v2, 12 x 768,
#: lost 3.5 points at 1e-4 against 2e-5 on SST-2's dev set with 8 texts per class)
AUTO_RATE_REFERENCE_SIZE = 6 * 384
#: CoSENT's scale (Su 2022; sentence-transformers' CoSENTLoss default)
COSENT_SCALE = 20.0

#: the numpydoc entries of the contrastive objective's parameters
CONTRASTIVE_PARAMETERS = numpydoc_entries(
    """
contrastive_loss : {"batch-cosine", "cosine", "supcon", "cosent", "batch-hard-triplet"}, \
default="batch-cosine"
    The loss of ``objective="contrastive"``. ``"cosine"``: SetFit's default
    (sentence-transformers' ``CosineSimilarityLoss``) on labelled pairs, the squared error
    of cos(u, v) against 1 for a pair of the same label and 0 for one of different labels;
    each step takes ``batch_size`` pairs. ``"batch-cosine"``: the same squared error over
    every pair of a batch of ``batch_size`` texts balanced by label, positive and negative
    pairs weighed alike: a batch of 32 texts trains 496 pairs for the cost of encoding 32
    texts. ``"supcon"``: the supervised contrastive loss of Khosla et al. (2020) on the same
    batches, in which every text of a shared label is a positive of each other and every
    other text a negative (``temperature``). ``"cosent"``: CoSENT (Su 2022) on the same
    batches, every positive pair's cosine ranked above every negative pair's
    (``log(1 + sum exp(20 * (cos_neg - cos_pos)))``), with no target value for either.
    ``"batch-hard-triplet"``: the batch-hard triplet loss with a soft margin (Hermans et al.
    2017; sentence-transformers' ``BatchHardSoftMarginTripletLoss``) on the same batches,
    each text's farthest positive pulled nearer than its nearest negative.
    Why ``"batch-cosine"`` is the default (``"cosent"`` was ahead of it on held-out texts at
    six of eight sizes, behind it on the test sets at six): the user guide.
pairs_per_text : int or "auto", default="auto"
    How much an epoch of ``objective="contrastive"`` trains: with
    ``contrastive_loss="cosine"``, each text is paired with this many texts of its label
    and as many of other labels, drawn afresh each epoch (SetFit's ``num_iterations``:
    ``2 * pairs_per_text * n_texts`` pairs per epoch); with an in-batch loss (the others),
    an epoch has ``ceil(pairs_per_text * n_texts / batch_size)`` batches, so each text is
    in about this many when the batches are full, and in fewer when they are not: a batch
    takes at most ``batch_size / labels in a batch`` texts of a label (with 8 texts of each
    of 2 labels and a batch of 32, every batch holds the 16 texts, each text in about half
    ``pairs_per_text`` batches). ``"auto"``: 20 for ``"cosine"`` (SetFit's default), 30 for
    the in-batch losses. The pairs are drawn batch by batch, never all held.
temperature : float, default=0.1
    Temperature of ``contrastive_loss="supcon"`` (Khosla et al.: 0.1): the cosine
    similarities are divided by it. Lower values weigh the hardest negatives more.
train_dropout : bool, default=True
    Whether the encoder's dropout (the probabilities of its configuration) is on while it
    trains (``fine_tune="full"``, any objective), as in SetFit and SBERT; False trains it
    as with every dropout probability at 0. Held out, False was 0.6 to 1.7 points ahead on
    six-class TREC with 8 to 32 texts per class and level on SST-2; on the test sets it was not
    (the user guide): a hyperparameter to search, not the default. Inference never drops
    anything.
"""
)


def pairs_per_text(estimator) -> int:
    """The estimator's ``pairs_per_text``, ``"auto"`` resolved for its ``contrastive_loss``."""
    if estimator.pairs_per_text == "auto":
        return AUTO_PAIRS_PER_TEXT[estimator.contrastive_loss]
    return estimator.pairs_per_text


def in_batch_steps(n_texts: int, passes: int, batch_size: int) -> int:
    """Batches per epoch of an in-batch contrastive loss (:class:`BalancedTextSampler`)."""
    return BalancedTextSampler.batches_per_epoch(n_texts, passes, batch_size)


def auto_learning_rate(
    objective: str,
    contrastive_loss: str,
    steps_per_epoch: int = 1,
    encoder_size: int = AUTO_RATE_REFERENCE_SIZE,
) -> float:
    """What ``learning_rate="auto"`` of a sentence transformer means for ``objective``.

    Parameters
    ----------
    objective : str
        The resolved objective.
    contrastive_loss : str
        The estimator's ``contrastive_loss``.
    steps_per_epoch : int, default=1
        Batches per epoch (:func:`in_batch_steps`); used by the in-batch losses only.
    encoder_size : int, default=AUTO_RATE_REFERENCE_SIZE
        The encoder's layers times its width; used by the in-batch losses only.

    Returns
    -------
    float
        2e-5, or for an in-batch contrastive loss ``1e-4 * min(1, 24 / steps_per_epoch) *
        min(1, 2304 / encoder_size)`` and at least 2e-5: the same few updates of 1e-4 for a
        handful of texts, and as the texts grow more, smaller steps (with 1e-4 at 64 texts
        per class, 120 steps at batch 32, the encoder drifts: SST-2 dev accuracy 0.723
        against 0.768 at 2e-5); and smaller steps for an encoder larger than
        all-MiniLM-L6-v2's 6 layers of 384 (2304), on which these were measured.
    """
    if objective == "contrastive" and contrastive_loss != "cosine":
        scale = min(1.0, AUTO_FULL_RATE_STEPS / max(1, steps_per_epoch))
        scale *= min(1.0, AUTO_RATE_REFERENCE_SIZE / max(1, encoder_size))
        return max(AUTO_LEARNING_RATE["default"], AUTO_LEARNING_RATE["in-batch"] * scale)
    return AUTO_LEARNING_RATE["default"]


def training_config(estimator, settings, objective: str, n_texts: int, backbone, **loop):
    """The training loop's configuration of a sentence transformer's fit, ``"auto"`` resolved.

    Parameters
    ----------
    estimator : BertSentenceTransformer
        Its ``contrastive_loss``, ``pairs_per_text``, ``batch_size``, ``train_dropout`` and
        ``verbose`` are read.
    settings : TrainingSettings
        The fit's resolved training settings.
    objective : str
        The resolved objective.
    n_texts : int
        Training texts (or pairs).
    backbone : transformers.PreTrainedModel
        The loaded encoder, whose layers times width :func:`auto_learning_rate` reads.
    **loop
        ``device`` and ``dtype`` of :meth:`TrainingSettings.loop_config`.

    Returns
    -------
    TrainingConfig
        With ``learning_rate`` the settings' rate, or :func:`auto_learning_rate`'s for this
        fit when it is "auto", and ``backbone_dropout`` the estimator's ``train_dropout``.
    """
    rate = settings.learning_rate
    if rate == "auto":
        steps = in_batch_steps(n_texts, pairs_per_text(estimator), estimator.batch_size)
        size = backbone.config.num_hidden_layers * backbone.config.hidden_size
        rate = auto_learning_rate(objective, estimator.contrastive_loss, steps, size)
    return settings.loop_config(
        verbose=estimator.verbose,
        learning_rate=float(rate),
        backbone_dropout=bool(estimator.train_dropout),
        **loop,
    )


def label_codes(y: np.ndarray, multilabel: bool) -> np.ndarray:
    """Class codes ``0 .. n_classes - 1`` of 1-D labels, or the 0/1 indicator as int8."""
    if multilabel:
        return np.asarray(y).astype(np.int8)
    return np.unique(y, return_inverse=True)[1].astype(np.int64)


def refuse_split_batches(contrastive_loss: str) -> None:
    """Refuse an in-batch loss in a launch (``torchrun``): each process computes the loss of
    its share of the batch, and an in-batch loss compares only the texts of one share (the
    balanced sampler lays a label's texts side by side, so a share often holds one label and
    no negative pair); that is not the step one process takes on the whole batch. Drawn
    pairs (``"cosine"``) train alike in a launch."""
    if contrastive_loss == "cosine" or not current_share().distributed:
        return
    raise ValueError(
        f"contrastive_loss={contrastive_loss!r} compares every two texts of a batch, and in a "
        "launch of several processes (torchrun) each process sees only its share of the batch, "
        "often of one label: it would not train as one process does. Fit it in one process, "
        "or use contrastive_loss='cosine' (drawn pairs, which train alike in a launch)."
    )


def contrastive_training(estimator, encoded, labels, device):
    """``(make_batches, loss_fn)`` of the training loop for the contrastive objective.

    Parameters
    ----------
    estimator : BertSentenceTransformer
        Its ``contrastive_loss``, ``pairs_per_text``, ``temperature`` and ``batch_size``.
    encoded : EncodedTexts
        The training texts' model rows.
    labels : ndarray
        :func:`label_codes` of ``y``.
    device : torch.device
        Where the batches go.

    Raises
    ------
    ValueError
        If no two texts share a label, or every two do (no positive or no negative pair).
    """
    multilabel = labels.ndim == 2
    amount = pairs_per_text(estimator)
    if estimator.contrastive_loss == "cosine":
        sampler = PairSampler(labels, amount, estimator.batch_size)
    else:
        sampler = BalancedTextSampler(labels, amount, estimator.batch_size)
        held = torch.as_tensor(labels, device=device)
        if multilabel:
            held = held.float()

    def vectors(net, texts):
        return net(estimator._batch_tensors(encoded, texts, device)).float()

    # each loss runs with autocast off (full_precision): under a bf16 or fp16 fit its products
    # (the cosine matrix, the rows' gather) ran in bfloat16, supcon's gradient 15 % off
    def pair_loss(net, batch):
        texts, sides = np.unique(batch[:, :2], return_inverse=True)  # each text encoded once
        sides = torch.as_tensor(sides.reshape(-1, 2), device=device)
        z = vectors(net, texts)
        target = torch.as_tensor(batch[:, 2], dtype=torch.float32, device=device)
        with full_precision(device):
            first, second = gather_rows(z, sides[:, 0]), gather_rows(z, sides[:, 1])
            return cosine_pair_loss(first, second, target)

    def in_batch_loss(net, batch):
        z = vectors(net, batch)
        mine = held[torch.as_tensor(batch, device=device)]
        with full_precision(device):
            return _in_batch(estimator, z, mine, multilabel)

    loss_fn = pair_loss if estimator.contrastive_loss == "cosine" else in_batch_loss
    return sampler.epoch, loss_fn


def _in_batch(estimator, z, mine, multilabel: bool):
    """The in-batch loss of the float32 vectors ``z`` of texts of labels ``mine``."""
    positives = mine @ mine.T > 0 if multilabel else mine[:, None] == mine[None, :]
    if estimator.contrastive_loss == "batch-cosine":
        return batch_cosine_loss(z, positives)
    if estimator.contrastive_loss == "cosent":
        return batch_cosent_loss(z, positives, COSENT_SCALE)
    if estimator.contrastive_loss == "batch-hard-triplet":
        return batch_hard_triplet_loss(z, positives)
    return supervised_contrastive_loss(z, positives, estimator.temperature)
