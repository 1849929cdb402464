"""BertTextClassifier: fine-tune a BERT-family encoder for text classification."""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch
from scipy.special import expit
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.class_weight import compute_class_weight

from ._estimator.parameter_docs import (
    FINE_TUNED_ATTRIBUTES,
    document,
    fine_tuned_precision,
    numpydoc_entries,
)
from ._estimator.sample_weights import row_weights, weighted_mean_loss
from ._estimator.supervised import SupervisedEstimator
from ._estimator.targets import check_class_labels, check_validation_split
from ._nn.backbone import DEFAULT_MODEL
from .pretraining import within_task_pretrain

__all__ = ["BertTextClassifier"]


def _right(predicted, truth) -> np.ndarray:
    """Whether each row is predicted right (all labels of a row, for multi-label), as
    ``ClassifierMixin.score`` counts them for its accuracy."""
    if predicted.ndim == 2:
        return np.all(predicted == truth, axis=1)
    return predicted == truth


_OWN_PARAMETERS = numpydoc_entries(
    """
early_stopping : bool, default=False
    Hold out ``validation_fraction`` of the data (stratified for single-label y, at random
    for multi-label y), score accuracy (subset accuracy for multi-label y) after each
    epoch (with the code of :meth:`predict`, so the score is what :meth:`score` gives on
    those texts), stop after ``n_iter_no_change`` epochs without improvement and keep
    the best epoch's weights.
class_weight : dict, "balanced" or None, default=None
    Weights of the classes in the loss (single-label only): a dict from label to weight,
    or ``"balanced"`` (inversely proportional to the class frequencies). A class missing
    from the dict weighs 1; labels that are not in y are allowed when every class of y is
    in the dict (a cross-validation fold without a rare class), as in scikit-learn. Weights
    are finite numbers >= 0; a weight of 0 leaves that class's texts out of the loss. Each
    text's loss is multiplied by its class's weight and a batch's sum divided by its size
    times the mean weight of y's texts, so that the weights count in every batch (one of a
    single class too) and the loss keeps its scale.
warm_start : bool, default=False
    Continue training the fitted model on the next ``fit`` instead of starting anew
    (the labels, the input kind and the parameters that shape the network must be the
    same; learning rates, epochs, ``fine_tune`` and ``dropout`` may change). The fit
    trains a copy, so the fitted model stays as it was if the fit fails.
"""
    + fine_tuned_precision("Probabilities are always computed in float64.")
)

_OWN_ATTRIBUTES = numpydoc_entries(
    """
classes_ : ndarray
    Class labels (for multi-label: ``0 ... n_labels - 1``).
multilabel_ : bool
    Whether ``y`` was a binary indicator matrix.
loss_curve_ : list of float
    Mean training loss per epoch.
validation_scores_ : list of float or None
    Validation accuracy per epoch with ``early_stopping``, else None.
"""
)


@document(
    own_parameters=_OWN_PARAMETERS,
    attributes=("classes_", "multilabel_", *FINE_TUNED_ATTRIBUTES),
    own_attributes=_OWN_ATTRIBUTES,
)
class BertTextClassifier(ClassifierMixin, SupervisedEstimator):
    """Fine-tune a BERT-family encoder for text classification, with Sun et al.'s knobs.

    Sun et al. (2019) found what matters when fine-tuning BERT for classification: how long
    texts are cut (head, tail, head+tail, hierarchical chunks), which layer is read,
    layer-wise learning-rate decay and further masked-LM pre-training on the task's texts.
    Each is a parameter here, so ``GridSearchCV`` can choose.

    Parameters
    ----------
    $parameters

    Attributes
    ----------
    $attributes

    See Also
    --------
    BertSentenceTransformer : Frozen or siamese-trained sentence vectors for any estimator.

    Notes
    -----
    y may be a 1-D array of labels of any type (strings, ints), or a 2-D binary indicator
    matrix for multi-label classification (sigmoid outputs, ``predict_proba`` per label).
    X may hold sentence pairs (2 columns), encoded together.

    References
    ----------
    Sun, C., Qiu, X., Xu, Y., Huang, X. (2019). How to fine-tune BERT for text
    classification? CCL 2019.

    Examples
    --------
    >>> from skbert import BertTextClassifier
    >>> from skbert.datasets import load_demo_sentiment
    >>> X, y = load_demo_sentiment(return_X_y=True)
    >>> clf = BertTextClassifier(max_length=64, max_epochs=2, random_state=0)
    >>> clf.fit(X[:200], y[:200]).score(X[200:], y[200:])  # doctest: +SKIP
    0.685
    """

    _SAVED_FITTED = (*SupervisedEstimator._SAVED_FITTED, "classes_", "multilabel_")
    _parameter_constraints: dict = {
        **SupervisedEstimator._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
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
        class_weight=None,
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
        self.class_weight = class_weight
        self.random_state = random_state
        self.warm_start = warm_start
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_steps = checkpoint_steps
        self.device = device
        self.precision = precision
        self.verbose = verbose

    # ------------------------------------------------------------------ fit
    _kind = "classifier"
    _within_task_pretrain = staticmethod(within_task_pretrain)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fine-tune the encoder and the output layer on labelled texts.

        All or nothing: if the fit fails or is interrupted (Ctrl-C), the estimator is left
        exactly as it was before (fitted or not). With ``checkpoint_dir``, an interrupted fit
        is continued by the next ``fit`` on the same data.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs.
        y : array-like of shape (n_samples,) or (n_samples, n_labels)
            Class labels, or a binary indicator matrix for multi-label.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each sample: its loss is multiplied by it (and by its
            class's ``class_weight``), as scikit-learn's classifiers weigh samples; 0 takes
            it out of the loss (its label changes nothing; it still counts for ``classes_``,
            ``"balanced"`` weights and the split, and ``mlm_steps`` pre-trains on its text).
            With ``early_stopping``, the held-out accuracy is weighted as
            ``score(X, y, sample_weight)`` weighs it. None (or weights all equal) trains
            unweighted.

        Returns
        -------
        self : BertTextClassifier
            The fitted classifier.

        Raises
        ------
        skbert.exceptions.TrainingDivergedError
            If the training loss or gradients become NaN or infinite (the message names the
            step and what to change).
        """
        with self._atomic_fit():
            self._fit(X, y, sample_weight)
        return self

    def _check_targets(self, y, n_samples):
        y, multilabel = check_class_labels(
            y, n_samples, allow_multilabel=True, estimator="BertTextClassifier"
        )
        if self.early_stopping:
            check_validation_split(y, self.validation_fraction, multilabel=multilabel)
        if multilabel and self.class_weight is not None:  # it was ignored without a word
            raise ValueError(
                f"class_weight={self.class_weight!r} weighs the classes of single-label y, and "
                f"y is a multi-label indicator of {y.shape[1]} labels; use class_weight=None "
                "for multi-label y."
            )
        if isinstance(self.class_weight, dict):  # before any work is done
            for label, weight in self.class_weight.items():
                if (
                    not isinstance(weight, Real)
                    or isinstance(weight, (bool, np.bool_))
                    or not np.isfinite(weight)
                    or weight < 0
                ):
                    raise ValueError(
                        f"class_weight[{label!r}] is {weight!r}; a class's weight must be a "
                        "finite number >= 0 (0 leaves its texts out of the loss)."
                    )
            classes = np.unique(y).tolist()
            unknown = set(self.class_weight) - set(classes)
            unweighted = [c for c in classes if c not in self.class_weight]
            # as compute_class_weight: labels absent from y (a cross-validation fold
            # without a rare class) are allowed when every class of y has its weight
            if unknown and unweighted:
                raise ValueError(
                    f"class_weight has labels {sorted(unknown, key=str)} that are not in y, "
                    f"and y's classes {unweighted} have no weight; classes are {classes}."
                )
            if all(self.class_weight.get(c, 1.0) == 0 for c in classes):
                raise ValueError(
                    f"class_weight={self.class_weight!r} gives every class of y weight 0: "
                    "nothing to learn from."
                )
        return y

    def _learn_targets(self, y, continuing, weights):
        """Encode y for the loss; sets ``classes_`` (or checks it with warm_start)."""
        multilabel = y.ndim == 2
        if multilabel:
            classes = np.arange(y.shape[1])
            encoded = y
        else:
            encoder = LabelEncoder().fit(y)
            classes = encoder.classes_
        if continuing:
            same = len(classes) == len(self.classes_) and np.all(classes == self.classes_)
            if multilabel != self.multilabel_ or not same:
                new, fitted = classes.tolist(), self.classes_.tolist()
                if multilabel != self.multilabel_:
                    what = (
                        f"y is {'a multi-label indicator' if multilabel else 'single-label'}"
                        f" and the classifier was fitted on "
                        f"{'multi-label' if self.multilabel_ else 'single-label'} y"
                    )
                else:
                    added = [c for c in new if c not in fitted]
                    missing = [c for c in fitted if c not in new]
                    what = f"y's labels differ from the fitted classes_ ({len(fitted)})"
                    what += f": new in y {added[:10]}" if added else ""
                    what += f"; absent from y {missing[:10]}" if missing else ""
                raise ValueError(
                    f"warm_start=True but {what}; fit with warm_start=False to start anew."
                )
        if not multilabel:
            encoded = np.searchsorted(classes, y).astype(np.int64)
        self.classes_ = classes
        self.multilabel_ = multilabel
        return encoded

    def _checkpoint_task(self):
        return {"classes": list(self.classes_)}

    def _n_outputs(self):
        return len(self.classes_)

    def _stratify(self, targets):
        return None if self.multilabel_ else targets

    def _loss_weights(self, y_encoded, multilabel):
        if multilabel or self.class_weight is None:
            return None
        present = np.arange(len(self.classes_))
        if self.class_weight == "balanced":
            return compute_class_weight("balanced", classes=present, y=y_encoded)
        return np.array([self.class_weight.get(c, 1.0) for c in self.classes_.tolist()])

    def _training_loss(self, targets, device, weights, train_rows):
        target_tensor = torch.as_tensor(targets)
        # each row's weight: its class's (class_weight) times its own (sample_weight)
        per_class = self._loss_weights(targets, self.multilabel_)
        rows = None if per_class is None else per_class[targets]
        if weights is not None:
            rows = weights if rows is None else rows * weights
        reduction = "mean" if rows is None else "none"
        if self.multilabel_:
            criterion = torch.nn.BCEWithLogitsLoss(reduction=reduction)
        else:
            criterion = torch.nn.CrossEntropyLoss(reduction=reduction)
        if rows is not None:
            # each row's loss times its weight, a batch's sum over its size times the mean
            # weight of the training rows: torch's weighted mean divided by the batch's own sum of
            # weights instead, so that in a batch of one class (batches are grouped by text
            # length) the weight cancelled out
            why = "class_weight and sample_weight" if per_class is not None else "sample_weight"
            row_weight = row_weights(rows, train_rows, why)
            mean_weight = float(row_weight[train_rows].mean())  # > 0: row_weights checked

        def loss(logits, indices):
            target = target_tensor[indices].to(device)
            if rows is None:
                return criterion(logits.float(), target)
            values = criterion(logits.float(), target)
            if self.multilabel_:  # one loss per label: a row's is their mean
                values = values.mean(dim=1)
            return weighted_mean_loss(values, row_weight[indices].to(device), mean_weight)

        return loss

    def _held_out_score(self, logits, rows, y, targets, weights):
        right = _right(self._decide(logits), targets[rows])
        if weights is None:
            return int(right.sum()), len(rows)
        return float(weights[rows] @ right), float(weights[rows].sum())  # as score() weighs

    # ------------------------------------------------------------------ predict
    def _decide(self, logits):
        """Encoded predictions from logits: label indices, or a 0/1 matrix for multi-label."""
        if self.multilabel_:
            return (logits > 0).astype(np.int64)
        return logits.argmax(axis=1)

    def decision_function(self, X):
        """Compute the logits of the output layer.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
            For two classes, the positive logit minus the negative one; else one logit per
            class (or per label for multi-label).
        """
        logits = self._network_outputs(X)
        if not self.multilabel_ and logits.shape[1] == 2:
            return logits[:, 1] - logits[:, 0]
        return logits

    def predict_proba(self, X):
        """Class probabilities (softmax), or per-label probabilities (sigmoid) for multi-label.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs.

        Returns
        -------
        ndarray of shape (n_samples, n_classes) or (n_samples, n_labels)
            Probabilities, in float64; columns follow ``classes_``.
        """
        logits = self._network_outputs(X).astype(np.float64)
        if self.multilabel_:
            return expit(logits)  # 1 / (1 + exp(-logits)), without overflow warnings
        logits -= logits.max(axis=1, keepdims=True)
        proba = np.exp(logits)
        return proba / proba.sum(axis=1, keepdims=True)

    def predict(self, X):
        """Predicted labels.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_labels)
            Labels from ``classes_``, or a 0/1 matrix for multi-label.
        """
        decided = self._decide(self._network_outputs(X))
        return decided if self.multilabel_ else self.classes_[decided]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        return tags
