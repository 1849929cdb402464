"""BertTextRegressor: fine-tune a BERT-family encoder on real-valued targets.

Single texts (a rating, a price, a readability score) or sentence pairs read together: a
cross-encoder, the strongest method for the similarity of two sentences when every pair to
score is at hand (STS-B).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import RegressorMixin, _fit_context
from sklearn.metrics import r2_score
from sklearn.utils._param_validation import StrOptions

from ._estimator.parameter_docs import (
    FINE_TUNED_ATTRIBUTES,
    document,
    fine_tuned_precision,
    numpydoc_entries,
)
from ._estimator.sample_weights import row_weights, weighted_mean_loss
from ._estimator.supervised import SupervisedEstimator
from ._estimator.targets import (
    check_regression_targets,
    check_validation_split,
    squares_hold,
    standardisation,
)
from ._nn.backbone import DEFAULT_MODEL
from ._nn.losses import REGRESSION_LOSSES, regression_loss
from .pretraining import within_task_pretrain

__all__ = ["BertTextRegressor"]


_OWN_PARAMETERS = numpydoc_entries(
    """
early_stopping : bool, default=False
    Hold out ``validation_fraction`` of the data, score R^2 after each epoch (with the
    code of :meth:`predict`, so the score is what :meth:`score` gives on those texts),
    stop after ``n_iter_no_change`` epochs without improvement and keep the best epoch's
    weights.
loss : {"squared_error", "huber", "absolute_error"}, default="squared_error"
    The training loss, on the standardised targets: squared error, the Huber loss
    (squared within one standard deviation of the target, linear beyond: robust to
    outliers) or absolute error (predicts medians).
warm_start : bool, default=False
    Continue training the fitted model on the next ``fit`` instead of starting anew
    (the number of outputs, the input kind and the parameters that shape the network
    must be the same, and the targets are standardised as in the first fit; learning
    rates, epochs, ``fine_tune``, ``dropout`` and ``loss`` may change). The fit trains a
    copy, so the fitted model stays as it was if the fit fails.
"""
    + fine_tuned_precision("Predictions are always in float64.")
)

_OWN_ATTRIBUTES = numpydoc_entries(
    """
n_outputs_ : int
    Targets per sample (columns of a 2-D ``y``, else 1).
multioutput_ : bool
    Whether ``y`` was 2-D; :meth:`predict` then returns 2-D values (even for one column).
target_mean_ : ndarray of shape (n_outputs,)
    Mean of each target in ``fit`` (float64), subtracted before training.
target_scale_ : ndarray of shape (n_outputs,)
    Standard deviation of each target in ``fit`` (float64); the network predicts
    ``(y - target_mean_) / target_scale_``.
loss_curve_ : list of float
    Mean training loss per epoch (on the standardised targets).
validation_scores_ : list of float or None
    Validation R^2 per epoch with ``early_stopping``, else None.
"""
)


@document(
    own_parameters=_OWN_PARAMETERS,
    attributes=(
        "n_outputs_",
        "multioutput_",
        "target_mean_",
        "target_scale_",
        *FINE_TUNED_ATTRIBUTES,
    ),
    own_attributes=_OWN_ATTRIBUTES,
)
class BertTextRegressor(RegressorMixin, SupervisedEstimator):
    """Fine-tune a BERT-family encoder on real-valued targets, for texts or sentence pairs.

    The encoder, its read-out and an output layer of one unit per target are fine-tuned
    together, as :class:`BertTextClassifier` does for labels, with the same knobs. Sentence
    pairs (2-column ``X``) are encoded together, ``[CLS] a [SEP] b [SEP]`` in the model's own
    special tokens: a cross-encoder, which reads both sentences at once (STS-B: the best
    similarity scores of a given encoder, at the cost of one forward pass per pair; a
    bi-encoder, :class:`BertSentenceTransformer`, embeds each sentence once for search).

    The targets are standardised inside the estimator (mean 0, standard deviation 1 per
    output, learned by ``fit``): the network trains on those, and :meth:`predict` returns
    values in the units of ``y``. So the defaults serve targets in [0, 5] and around 1e6
    alike.

    Parameters
    ----------
    $parameters

    Attributes
    ----------
    $attributes

    See Also
    --------
    BertTextClassifier : The same fine-tuning for class labels.
    BertSentenceTransformer : Sentence vectors (a bi-encoder), fine-tuned on similarity
        scores with ``objective="cosine"``.
    skbert.metrics.spearman_scorer : Spearman correlation of predictions, for STS.

    Notes
    -----
    ``early_stopping`` scores R^2, which is not a mean over rows: in a ``torchrun`` launch
    the first process scores every held-out row (the others wait), so that the score is the
    one :meth:`score` gives.

    References
    ----------
    Reimers, N., Gurevych, I. (2019). Sentence-BERT: Sentence embeddings using Siamese
    BERT-networks. EMNLP 2019 (cross-encoder and bi-encoder on STS-B).

    Examples
    --------
    A cross-encoder on 300 of the 5,749 training pairs of STS-B, scored (R^2) on the next 200:

    >>> from skbert import BertTextRegressor
    >>> from skbert.datasets import load_stsb
    >>> X, y = load_stsb("train", return_X_y=True)  # sentence pairs, scores 0 to 5
    >>> reg = BertTextRegressor(max_length=64, max_epochs=2, batch_size=16,
    ...                         learning_rate=1e-4, random_state=0)
    >>> score = reg.fit(X[:300], y[:300]).score(X[300:500], y[300:500])  # doctest: +SKIP
    >>> round(score, 3)  # doctest: +SKIP
    0.648
    """

    _SAVED_FITTED = (*SupervisedEstimator._SAVED_FITTED, "target_mean_", "target_scale_")
    _parameter_constraints: dict = {
        **SupervisedEstimator._parameter_constraints,
        "loss": [StrOptions(set(REGRESSION_LOSSES))],
    }

    def __init__(
        self,
        model=DEFAULT_MODEL,
        *,
        pooling="mean",
        layer=-1,
        layer_combine="concat",
        truncation="head",
        max_length=None,
        head_length=128,
        chunk_pooling="mean",
        max_chunks=None,
        cnn_kernel_sizes=(1, 3, 5),
        cnn_channels=128,
        fine_tune="full",
        learning_rate=5e-5,
        layer_lr_decay=1.0,
        top_learning_rate=1e-3,
        head_learning_rate="deprecated",
        weight_decay=0.01,
        warmup_fraction=0.1,
        dropout=0.1,
        max_epochs=3,
        mlm_steps=0,
        mlm_probability=0.15,
        batch_size=32,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=2,
        loss="squared_error",
        random_state=None,
        warm_start=False,
        checkpoint_dir=None,
        checkpoint_steps=500,
        device="auto",
        precision="auto",
        verbose=0,
    ):
        self.model = model
        self.pooling = pooling
        self.layer = layer
        self.layer_combine = layer_combine
        self.truncation = truncation
        self.max_length = max_length
        self.head_length = head_length
        self.chunk_pooling = chunk_pooling
        self.max_chunks = max_chunks
        self.cnn_kernel_sizes = cnn_kernel_sizes
        self.cnn_channels = cnn_channels
        self.fine_tune = fine_tune
        self.learning_rate = learning_rate
        self.layer_lr_decay = layer_lr_decay
        self.top_learning_rate = top_learning_rate
        self.head_learning_rate = head_learning_rate
        self.weight_decay = weight_decay
        self.warmup_fraction = warmup_fraction
        self.dropout = dropout
        self.max_epochs = max_epochs
        self.mlm_steps = mlm_steps
        self.mlm_probability = mlm_probability
        self.batch_size = batch_size
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.loss = loss
        self.random_state = random_state
        self.warm_start = warm_start
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_steps = checkpoint_steps
        self.device = device
        self.precision = precision
        self.verbose = verbose

    # ------------------------------------------------------------------ fit
    _kind = "regressor"
    _within_task_pretrain = staticmethod(within_task_pretrain)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fine-tune the encoder and the output layer on texts with real-valued targets.

        All or nothing: if the fit fails or is interrupted (Ctrl-C), the estimator is left
        exactly as it was before (fitted or not). With ``checkpoint_dir``, an interrupted fit
        is continued by the next ``fit`` on the same data.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs (read together: a cross-encoder).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Real-valued targets, finite; no target may hold a single value.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each sample: its loss is multiplied by it, as
            scikit-learn's regressors weigh samples; 0 takes it out of the loss (its target
            changes nothing; its text still fills a place in a batch, and ``mlm_steps``
            pre-trains on it). With
            ``early_stopping``, the held-out R^2 is weighted as ``score(X, y,
            sample_weight)`` weighs it. ``y`` is standardised over the samples of positive
            weight (unweighted). None (or weights all equal) trains unweighted.

        Returns
        -------
        self : BertTextRegressor
            The fitted regressor.

        Raises
        ------
        ValueError
            For a target that is missing, infinite or not a number (its position is named),
            that holds one value for every sample or whose spread float64 cannot hold; with
            ``early_stopping``, when the held-out targets all hold one value (R^2 could not
            rank the epochs).
        skbert.exceptions.TrainingDivergedError
            If the training loss or gradients become NaN or infinite (the message names the
            step and what to change).
        """
        with self._atomic_fit():
            self._fit(X, y, sample_weight)
        return self

    def _check_targets(self, y, n_samples):
        y = check_regression_targets(y, n_samples, estimator="BertTextRegressor")
        if self.early_stopping:
            check_validation_split(y, self.validation_fraction, multilabel=True)  # unstratified
            n_validation = int(np.ceil(self.validation_fraction * n_samples))
            if n_validation < 2:
                raise ValueError(
                    f"early_stopping=True holds out validation_fraction="
                    f"{self.validation_fraction!r} of the {n_samples} samples: "
                    f"{n_validation}, and R^2 needs at least 2 to score. Use a larger "
                    "validation_fraction, more data, or early_stopping=False."
                )
        return y

    def _learn_targets(self, y, continuing, weights):
        """Set (or, with warm_start, check) the targets' shape and standardisation (over the
        samples of positive weight: one weighted 0 is left out); return the standardised
        targets, float32 of shape (n_samples, n_outputs)."""
        columns = y.reshape(len(y), -1)
        multioutput = y.ndim == 2
        if continuing:
            if (multioutput, columns.shape[1]) != (self.multioutput_, self.n_outputs_):
                raise ValueError(
                    f"warm_start=True but y has shape {y.shape} and the regressor was fitted "
                    f"on {self.n_outputs_} output(s) with a "
                    f"{'2-D' if self.multioutput_ else '1-D'} y; fit with warm_start=False "
                    "to start anew."
                )
        else:
            kept = columns if weights is None else columns[weights > 0]
            if weights is not None and (kept.min(axis=0) == kept.max(axis=0)).any():
                raise ValueError(
                    f"the samples of positive sample_weight hold one value of y, "
                    f"{kept[0].tolist()!r} (in some output), so nothing varies to learn; give "
                    "weight to samples of other values."
                )
            self.target_mean_, self.target_scale_ = standardisation(kept)
        self.n_outputs_ = columns.shape[1]
        self.multioutput_ = multioutput
        return ((columns - self.target_mean_) / self.target_scale_).astype(np.float32)

    def _checkpoint_task(self):
        return {"multioutput": self.multioutput_}

    def _n_outputs(self):
        return self.n_outputs_

    def _training_loss(self, targets, device, weights, train_rows):
        target_tensor = torch.as_tensor(targets)
        criterion = regression_loss(self.loss, "mean" if weights is None else "none").to(device)
        if weights is not None:
            row_weight = row_weights(weights, train_rows, "sample_weight")
            mean_weight = float(row_weight[train_rows].mean())

        def loss(outputs, indices):
            values = criterion(outputs.float(), target_tensor[indices].to(device))
            if weights is None:
                return values
            per_row = values.reshape(len(indices), -1).mean(dim=1)  # over the outputs
            return weighted_mean_loss(per_row, row_weight[indices].to(device), mean_weight)

        return loss

    def _check_held_out(self, y, rows):
        held = y[rows].reshape(len(rows), -1)
        if (held.min(axis=0) == held.max(axis=0)).all():  # R^2 is 0 at every epoch
            which = "targets are all" if y.ndim == 1 else "outputs are each constant, at"
            raise ValueError(
                f"early_stopping=True held out {len(rows)} samples (validation_fraction="
                f"{self.validation_fraction!r}) whose {which} {held[0].tolist()!r}: their R^2 "
                "is 0 at every epoch, so the fit would stop after n_iter_no_change + 1 epochs "
                "whatever it learns. Use a larger validation_fraction, another "
                "random_state, or early_stopping=False."
            )

    def _validation_rows(self, share, n_validation):
        # R^2 is no mean over rows: the first process scores them all, the others none
        return np.arange(n_validation if share.writer else 0)

    def _held_out_score(self, outputs, rows, y, targets, weights):
        weight = None if weights is None else weights[rows]
        if squares_hold(self.target_scale_).all():  # what score() gives
            return r2_score(y[rows], self._in_units(outputs), sample_weight=weight), 1
        # squares of targets past about 1e154 overflow (R^2 NaN: "diverged") and under 1e-154
        # vanish (R^2 1.0 always); R^2 does not change with the standardisation
        standardised = outputs.astype(np.float64).reshape(len(rows), -1)
        return r2_score(targets[rows].astype(np.float64), standardised, sample_weight=weight), 1

    # ------------------------------------------------------------------ predict
    def _in_units(self, outputs):
        """Predictions in the units of ``y`` from the network's (standardised) outputs."""
        values = outputs.astype(np.float64) * self.target_scale_ + self.target_mean_
        return values if self.multioutput_ else values[:, 0]

    def predict(self, X):
        """Predicted targets, in the units of ``y``.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs, the kind ``fit`` saw.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_outputs)
            The predictions, in float64; 2-D when ``y`` was 2-D.
        """
        return self._in_units(self._network_outputs(X))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
