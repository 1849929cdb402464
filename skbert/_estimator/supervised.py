"""The fine-tuning fit of the estimators that learn one target per text or sentence pair.

:class:`SupervisedEstimator` is what :class:`~skbert.BertTextClassifier` and
:class:`~skbert.BertTextRegressor` share: their training parameters, the fit (texts checked,
training settings resolved, a warm start or a new network with the within-task masked-LM phase
of ``mlm_steps``, the ``early_stopping`` split, the encoding, the batches, the checkpoint, the
training loop) and the prediction entry (:meth:`SupervisedEstimator._network_outputs`: the
input kind checked against the fit's, then the one inference path). A subclass says only what
its targets are, through the hooks below: how ``y`` is checked and turned into what the loss
reads, how many outputs the network has, the loss, and the held-out score of early stopping
(computed with the code of its ``predict``, so that it equals ``score`` on those rows).
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from numbers import Integral, Real

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.utils.validation import check_is_fitted

from .._core.deprecations import fine_tune_constraint
from .._core.devices import resolve_precision
from .._core.rng import seeded
from .._inference.predict import low_precision_copy, predict_rows
from .._nn.network import TaskNetwork
from .._text.encoding import refuse_chunked_pairs
from .._training.loop import length_grouped_batches, train
from .base import BertEstimatorBase
from .column_names import check_column_names, record_column_names
from .constraints import Number
from .sample_weights import check_sample_weight, weights_digest
from .training_settings import resolve_training_settings
from .validation import check_texts

__all__ = ["SupervisedEstimator"]


def _input_kind(pairs: bool) -> str:
    return "sentence pairs (2 columns)" if pairs else "single texts"


class SupervisedEstimator(BertEstimatorBase, metaclass=ABCMeta):
    """Base of the estimators fine-tuned on one target (or one row of targets) per input.

    Subclasses store their parameters in ``__init__``, define ``fit`` as
    ``with self._atomic_fit(): self._fit(X, y)`` (so that deprecation warnings point at their
    ``fit``), their prediction methods on :meth:`_network_outputs`, and the hooks
    :meth:`_check_targets`, :meth:`_learn_targets`, :meth:`_n_outputs`,
    :meth:`_training_loss` and :meth:`_held_out_score` (and, where they differ from the
    defaults, :meth:`_checkpoint_task`, :meth:`_stratify` and :meth:`_validation_rows`).
    The class is abstract: it joins no registry of estimator classes.
    """

    _parameter_constraints: dict = {
        **BertEstimatorBase._parameter_constraints,
        **BertEstimatorBase._training_constraints,
        "fine_tune": [fine_tune_constraint({"full", "top"})],
        "dropout": [Number(Real, 0, 1, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Number(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Number(Integral, 1, None, closed="left")],
        "mlm_steps": [Number(Integral, 0, None, closed="left")],
        "mlm_probability": [Number(Real, 0, 1, closed="neither")],
    }

    #: what the messages call the estimator ("classifier", "regressor")
    _kind = "estimator"

    #: the within-task masked-LM phase of ``mlm_steps``: the public estimators set it to
    #: :func:`skbert.pretraining.within_task_pretrain` (a module of the layer above this one)
    _within_task_pretrain = None

    # ------------------------------------------------------------------ hooks
    @abstractmethod
    def _check_targets(self, y, n_samples: int) -> np.ndarray:
        """``y`` checked (and, with ``early_stopping``, its split), before anything is reset."""

    @abstractmethod
    def _learn_targets(self, y: np.ndarray, continuing: bool, weights) -> np.ndarray:
        """Set the fitted attributes that describe the targets (or check them against the
        fitted ones for a ``warm_start`` fit), from the samples that ``weights`` (or None)
        does not leave out; return the targets the loss reads."""

    @abstractmethod
    def _n_outputs(self) -> int:
        """Outputs of the network's output layer."""

    @abstractmethod
    def _training_loss(self, targets: np.ndarray, device, weights, train_rows):
        """``loss(outputs, indices)``: the mean loss of the rows ``indices`` (a tensor, or
        ``(tensor, weight)`` where the mean divides by another weight than their number),
        each row weighted by ``weights`` (``fit``'s ``sample_weight``, or None); the rows
        that train are ``train_rows``."""

    @abstractmethod
    def _held_out_score(self, outputs: np.ndarray, rows, y, targets, weights) -> tuple:
        """``(total, count)`` of the validation score of the held-out ``rows`` (positions in
        ``y``), from the network's ``outputs`` for them, as :meth:`predict` computes them and
        ``score`` weighs them by ``weights`` (or None)."""

    def _checkpoint_task(self) -> dict:
        """What, besides the data and the parameters, identifies the fit's checkpoint."""
        return {}

    def _stratify(self, targets):
        """The labels the ``early_stopping`` split is stratified on, or None."""
        return None

    def _check_held_out(self, y, rows) -> None:
        """Raise when the ``early_stopping`` split's held-out ``rows`` of ``y`` cannot rank
        the epochs."""

    def _validation_rows(self, share, n_validation: int) -> np.ndarray:
        """Positions, among the held-out rows, that this process scores (its share)."""
        return share.rows(n_validation)

    # ------------------------------------------------------------------ fit
    def _continuing(self) -> bool:
        return self.warm_start and "network_" in vars(self)

    def _fit(self, X, y, sample_weight=None):
        first, second = check_texts(X)
        refuse_chunked_pairs(second, self.truncation == "chunks")  # before any work is done
        y = self._check_targets(y, len(first))
        weights = check_sample_weight(sample_weight, len(first))
        continuing = self._continuing()
        if continuing and self.pairs_ != (second is not None):
            raise ValueError(
                f"warm_start=True but the {self._kind} was fitted on {_input_kind(self.pairs_)}"
                f" and X holds {_input_kind(second is not None)}; fit with "
                "warm_start=False to start anew."
            )
        settings = resolve_training_settings(self.get_params(deep=False))
        self._start_fit(keep_learned=continuing)
        targets = self._learn_targets(y, continuing, weights)
        self.pairs_ = second is not None
        record_column_names(self, X)
        task = {**self._checkpoint_task(), **weights_digest(weights)}
        checkpoint = self._checkpoint(first, second, targets, **task)
        seed = self._fit_seed(checkpoint)
        train_idx, val_idx = np.arange(len(first)), None
        if self.early_stopping:  # before the encoder loads: the split's check fails fast
            train_idx, val_idx = train_test_split(
                train_idx,
                test_size=self.validation_fraction,
                stratify=self._stratify(targets),
                random_state=seed,
            )
            self._check_held_out(y, val_idx)
            if weights is not None and not weights[val_idx].any():
                raise ValueError(
                    f"early_stopping=True held out {len(val_idx)} samples whose sample_weight "
                    "is 0: they cannot score the epochs. Use a larger validation_fraction, "
                    "another random_state, or early_stopping=False."
                )
        network = self._network(first, second, seed, continuing, checkpoint)
        device, dtype = self._device_and_dtype(trained=network)
        predict_dtype = resolve_precision(self.precision, device)  # that of predict and score
        encoded = self._encode(first, second)
        lengths = [sum(len(r[0]) for r in rows) for rows in encoded.rows]
        loss = self._training_loss(targets, device, weights, train_idx)

        def make_batches(rng):
            return length_grouped_batches([lengths[i] for i in train_idx], self.batch_size, rng)

        def loss_fn(network, batch):
            indices = train_idx[batch]
            return loss(network(**self._batch_tensors(encoded, indices, device)), indices)

        validate = None
        if val_idx is not None:
            held_out = {}  # this process's held-out rows, encoded once for all epochs

            def validate(network, share):
                # predict()'s own path: a validation score is score() on the held-out texts
                rows = val_idx[self._validation_rows(share, len(val_idx))]
                if len(rows) == 0:
                    return 0, 0
                if share not in held_out:
                    held_out[share] = encoded.subset(rows)
                inference = low_precision_copy(network, device, predict_dtype)
                outputs = predict_rows(
                    inference,
                    held_out[share],
                    device=device,
                    int8=self._int8_runs(device, inference),
                )
                return self._held_out_score(outputs, rows, y, targets, weights)

        config = settings.loop_config(
            device,
            dtype,
            self.verbose,
            early_stopping=self.early_stopping,
            n_iter_no_change=self.n_iter_no_change,
        )
        history = train(
            network,
            loss_fn,
            make_batches,
            config,
            validate=validate,
            seed=seed,
            desc="Fine-tuning",
            checkpoint=checkpoint,
            data_key=self._launch_data_key(first, second, targets, **task),
        )
        self.network_ = network
        self.loss_curve_ = history.loss_curve
        self.validation_scores_ = history.validation_scores if self.early_stopping else None
        self.best_validation_score_ = (
            max(history.validation_scores) if history.validation_scores else None
        )
        self.n_iter_ = history.n_iter

    def _network(self, first, second, seed: int, continuing: bool, checkpoint) -> TaskNetwork:
        """A copy of the fitted network for a ``warm_start`` fit, else a new one: the encoder
        (after ``mlm_steps`` of within-task masked-LM training) and a new output layer. The
        ``checkpoint``'s run (if any) is that of the weights before the masked-LM phase,
        which need not repeat bit for bit (other thread counts, a GPU)."""
        if continuing:
            network = self._warm_start_network()
            network.dropout.p = self.dropout
            return network
        with seeded(seed):
            encoder = self._build_encoder()
            self.mlm_loss_curve_ = None
            if self.mlm_steps:  # under its own forked RNGs: the output layer's init is unmoved
                if checkpoint is not None:
                    checkpoint.start_from(encoder)
                self.mlm_loss_curve_ = self._within_task_pretrain(
                    encoder.backbone,
                    list(first) + (list(second) if second is not None else []),
                    model=self.model,
                    max_steps=self.mlm_steps,
                    max_length=self.max_length_,
                    mlm_probability=self.mlm_probability,
                    batch_size=self.batch_size,
                    learning_rate=self.learning_rate,
                    weight_decay=self.weight_decay,
                    warmup_fraction=self.warmup_fraction,
                    seed=seed,
                    device=self.device,
                    precision=self.precision,
                    verbose=self.verbose,
                )
            return TaskNetwork(encoder, n_outputs=self._n_outputs(), dropout=self.dropout)

    # ------------------------------------------------------------------ predict
    def _network_outputs(self, X) -> np.ndarray:
        """The output layer's values for ``X`` (float32, one row per input), after checking
        that ``X`` holds the kind of input the estimator was fitted on."""
        check_is_fitted(self)
        first, second = check_texts(X)
        pairs = self.pairs_
        if pairs != (second is not None):
            raise ValueError(
                f"X holds {_input_kind(second is not None)}, but this {self._kind} was "
                f"fitted on {_input_kind(pairs)}; its output layer reads the encoding of "
                "that kind of input only."
            )
        check_column_names(self, X)
        return self._forward_all(first, second, desc="Predicting")
