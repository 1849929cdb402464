"""BertSentenceTransformer: sentence vectors from a BERT-family encoder."""

from __future__ import annotations

import copy
import os
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import ClassNamePrefixFeaturesOutMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core.deprecations import fine_tune_constraint, read_fine_tune
from ._core.rng import seeded
from ._estimator.base import FINE_TUNE_MODES, BertEstimatorBase
from ._estimator.column_names import check_column_names, record_column_names
from ._estimator.constraints import Number
from ._estimator.contrastive import (
    CONTRASTIVE_PARAMETERS,
    contrastive_training,
    label_codes,
    refuse_split_batches,
    training_config,
)
from ._estimator.feature_memory import cached_transform, fit_for_cache, memory_location
from ._estimator.model_source import resolve_normalize
from ._estimator.objectives import (
    class_targets,
    cosine_targets,
    refuse_untrainable_top,
    resolve_objective,
    warn_untrained_objective,
)
from ._estimator.one_read import OneReadTransformerMixin
from ._estimator.parameter_docs import INT8_PRECISION, document, numpydoc_entries
from ._estimator.targets import check_class_labels, check_scores
from ._estimator.training_settings import resolve_training_settings
from ._estimator.validation import check_texts
from ._estimator.wise_ft import WISE_PARAMETERS, average_back, starting_weights
from ._nn.backbone import DEFAULT_MODEL
from ._nn.contrastive_losses import CONTRASTIVE_LOSSES
from ._nn.network import SiameseNetwork
from ._training.loop import length_grouped_batches, train

__all__ = ["BertSentenceTransformer"]


_OWN_PARAMETERS = (
    numpydoc_entries(
        """
pooling : {"cls", "mean", "max", "cnn", "pooler"}, default="mean"
    How the token states become one vector: the first token's state, or the mean or
    maximum over the real (non-padding) tokens. ``"cnn"`` is a CNN over the token states
    (Choi et al.'s CNN-SBERT; ``cnn_kernel_sizes``, ``cnn_channels``) with weights of its
    own, which need training (``fine_tune="top"`` or ``"full"``). ``"pooler"`` is the
    model's own pooler (a dense layer and tanh over the first token, with the checkpoint's
    weights: BERT, ALBERT, RoBERTa, MPNet); with ``memory=`` its vectors are cached as
    they are, not assembled from the per-layer cache.
chunk_pooling : {"mean", "max", "attention"}, default="mean"
    How the window vectors of one text are combined with ``truncation="chunks"``.
    ``"attention"`` (Sun et al.'s hierarchical self-attention) has weights to train.
normalize : "auto" or bool, default="auto"
    Scale each vector to unit L2 norm. ``"auto"`` does what the checkpoint's own
    sentence-embedding pipeline does: True when its ``modules.json`` (a
    sentence-transformers checkpoint) ends in a ``Normalize`` module, as
    all-MiniLM-L6-v2's does, else False (warning where the checkpoint is not found). For
    ``model=`` a fitted sentence transformer, and a ``warm_start`` fit continuing this one,
    the answer of that fit. The choice is in ``normalize_``.
fine_tune : {"none", "top", "full"}, default="none"
    ``"none"``: the encoder stays frozen and ``fit`` only loads it. ``"full"``: ``fit``
    trains the encoder, its pooling weights and an output layer on ``(X, y)``,
    siamese-style (SBERT). ``"top"``: only the weights on top of the frozen encoder (a
    CNN pooling, chunk attention, with the output layer), so a pooling with weights is
    needed. ``"head"`` is the deprecated spelling of ``"top"``.
objective : {"auto", "cosine", "pair-softmax", "softmax", "contrastive"}, default="auto"
    Training objective; ``"auto"`` follows the data (see :meth:`fit`); ignored, with a
    warning if set, when ``fine_tune="none"``. ``"contrastive"`` (single texts with class
    labels, or a multi-label 0/1 indicator ``y``) trains the vectors themselves, SetFit-style:
    texts of a shared label close, others apart (``contrastive_loss``); fit a classifier on
    them next in a ``Pipeline``.
learning_rate : float or "auto", default="auto"
    AdamW learning rate of the encoder's top layer. ``"auto"``: 2e-5 (SBERT's), except for
    ``objective="contrastive"`` with an in-batch loss (all but ``"cosine"``), whose epochs
    take fewer, larger steps: 1e-4 for an epoch of up to 24 batches, lowered in proportion
    beyond (``1e-4 * 24 / batches``), never below 2e-5. With the defaults that is 1e-4 for
    up to 25 texts, 8e-5 for 32, 4e-5 for 64 and 2e-5 from 128, measured on all-MiniLM-L6-v2
    (6 layers of 384); a larger encoder's rate is lowered in proportion to its layers times
    its width, never below 2e-5 (12 layers of 768, as all-mpnet-base-v2 or BERT-base: a
    quarter, 2.5e-5 for up to 25 texts, then 2e-5).
max_epochs : int, default=1
    Passes over the training data (SBERT trains one epoch on STS-B).
random_state : int, RandomState instance or None, default=None
    Seeds the training (new weights, dropout, batch order); the same seed gives the same
    model bit for bit on the CPU (with the same number of torch threads; fits started at
    once in threads of one process train one at a time). None draws a seed.
warm_start : bool, default=False
    Continue training the fitted encoder on the next ``fit``. The output layer is kept
    too when the objective is the same, else a new one is started; so SBERT's recipe,
    NLI first and STS-B second, is ``fit(nli_pairs, labels)`` then
    ``set_params(warm_start=True).fit(sts_pairs, scores)``. The parameters that shape
    the network (``model``, ``pooling``, ``layer``, truncation and chunk settings, the
    CNN's widths) must not change in between: such a fit raises, naming the parameter.
    The fit trains a copy, so the fitted model stays as it was if the fit fails.
checkpoint_dir : str, path-like or None, default=None
    Folder where a training ``fit`` writes its state (weights, optimiser, schedule,
    random states, position) every ``checkpoint_steps`` steps and after each epoch,
    atomically. A later ``fit`` with the same data and parameters continues from it to
    the same result as an uninterrupted run (on the CPU, bit for bit); with other data or
    parameters it raises, naming the folder. Delete the folder when the model is final;
    None checkpoints nothing.
batch_size : int, default=32
    Texts (or pairs) per optimiser step in training, padded to the longest in the step (4
    or more for the in-batch contrastive losses: 2 labels of 2 texts make a positive pair).
    Inference (``transform``, ``similarity``) does not use it: it encodes blocks of texts
    of equal length whose shape depends on the device and the model only, so that a
    text's vector is the same bit for bit whatever other texts share the call.
precision : {"auto", "fp32", "bf16", "fp16", "int8"}, default="auto"
    Numeric precision. Inference runs a copy of the network cast to bf16 or fp16 (kept
    until the next ``fit``); training runs under autocast. ``"auto"`` is bf16 (or fp16)
    on CUDA, except for training a model smaller than BERT-base there (fp32, faster for
    such models), and fp32 elsewhere; ``"bf16"`` is much faster on CPUs with bf16 instructions
    (AVX512-BF16, AMX).
"""
        + INT8_PRECISION
        + """
    The output is always float32.
memory : None, str, path-like or joblib.Memory, default=None
    Frozen-feature cache (``fine_tune="none"`` only; ignored when training), like
    ``Pipeline(memory=...)``: a directory, or a ``joblib.Memory`` whose location is used. One
    forward pass per text stores [CLS], mean and max pooling of every layer, under a key of the
    model's weights and tokenizer (a hash of its files), the truncation settings, device type
    and precision; every ``pooling`` x ``layer`` x ``layer_combine`` is then read from it, so
    ``GridSearchCV`` over them costs about one forward pass. ``fit`` then loads the encoder only
    once a text is missing from the cache (and checks then that the model folder is unchanged
    since ``fit``). Safe with ``n_jobs > 1``: processes sharing the folder encode a text once (a
    lock file). Every shard is checked against its checksum before use; a damaged one is
    recomputed with a warning. About ``12 * hidden * (n_layers + 1)`` bytes per distinct text
    (32 KB for MiniLM); delete the folder to clear it.
verbose : int, default=0
    If > 0, show progress bars (over batches, and the training loss) and say how many
    texts were truncated or read from the cache; all on stderr.
"""
    )
    | CONTRASTIVE_PARAMETERS
    | WISE_PARAMETERS
)  # written beside the objective's code

_OWN_ATTRIBUTES = numpydoc_entries(
    """
network_ : torch.nn.Module
    The encoder with its pooling (``network_.backbone`` is the Hugging Face model).
    Absent when ``fit`` deferred loading the encoder (``deferred_network_``);
    :meth:`fitted_network` gives the network in either case.
deferred_network_ : DeferredNetwork
    Set in place of ``network_`` when ``fit`` deferred loading the encoder: with
    ``memory``, ``fine_tune="none"`` and a model in a local folder, ``fit`` reads only
    the tokenizer and configuration, and this records the folder, the hash of its files
    and the read-out. The first prediction that misses the cache loads the encoder
    (checking that the folder is unchanged) and keeps it with the estimator's
    prediction caches until the next ``fit``, not in an attribute; :meth:`save` writes
    it loaded, and sets ``network_`` to it. A pickle carries it loaded too (in the copy's
    prediction cache), so that it unpickles where the model folder is not.
normalize_ : bool
    Whether ``transform`` L2-normalises (``normalize`` resolved).
feature_fingerprint_ : str
    When fitted with ``memory``: hash of the model's files (or weights) that keys the
    cache (a model fitted before ``memory`` was set is hashed on first use, and the hash
    kept with the prediction caches).
objective_ : str
    The training objective (when trained).
learning_rate_ : float
    The learning rate of the encoder's top layer that the last training used (when
    trained): ``learning_rate``, or what ``"auto"`` resolved to for the objective, the
    loss, the number of texts and the encoder's size.
output_layer_ : torch.nn.Linear or None
    The trained output layer of a softmax objective (None for ``"cosine"``); not part of
    the vectors.
classes_ : ndarray
    Class labels of a softmax objective.
score_range_ : tuple of float
    Lowest and highest training score of the ``"cosine"`` objective.
loss_curve_ : list of float
    Mean training loss per epoch (when trained).
n_iter_ : int
    Epochs run by the last ``fit`` (when trained).
"""
)


@document(
    own_parameters=_OWN_PARAMETERS,
    attributes=(
        "feature_names_in_",
        "network_",
        "deferred_network_",
        "tokenizer_",
        "special_tokens_",
        "readout_",
        "max_length_",
        "layers_",
        "normalize_",
        "feature_fingerprint_",
        "objective_",
        "learning_rate_",
        "output_layer_",
        "classes_",
        "score_range_",
        "loss_curve_",
        "n_iter_",
    ),
    own_attributes=_OWN_ATTRIBUTES,
)
class BertSentenceTransformer(
    ClassNamePrefixFeaturesOutMixin, OneReadTransformerMixin, BertEstimatorBase
):
    """Sentence vectors read out of a BERT-family encoder, as a scikit-learn transformer.

    Every way of reading a sentence vector out of BERT studied by Choi et al. (2021) and
    Sun et al. (2019) is a hyperparameter, so that ``GridSearchCV`` can choose: the pooling
    ([CLS], mean or max of the token states, or a trained CNN), the layer(s) read and how
    several are combined, how texts longer than the model's limit are cut, and whether the
    encoder is fine-tuned siamese-style (SBERT).

    Parameters
    ----------
    $parameters

    Attributes
    ----------
    $attributes

    See Also
    --------
    BertTextClassifier : Fine-tune the encoder for classification.
    sklearn.feature_extraction.text.TfidfVectorizer : The classic text featurizer.

    Notes
    -----
    Input is a 1-D collection of strings (list, numpy array, pandas Series) or an array-like of
    shape ``(n_samples, 2)`` for sentence pairs, which are encoded together as one input
    (``[CLS] a [SEP] b [SEP]``). Empty strings are valid texts.

    References
    ----------
    Choi, H., Kim, J., Joe, S., Gwon, Y. (2021). Evaluation of BERT and ALBERT sentence
    embedding performance on downstream NLP tasks. ICPR 2020.

    Sun, C., Qiu, X., Xu, Y., Huang, X. (2019). How to fine-tune BERT for text
    classification? CCL 2019.

    Wortsman, M., Ilharco, G., Kim, J. W., et al. (2022). Robust fine-tuning of zero-shot
    models. CVPR 2022 (``wise_alpha``).

    Examples
    --------
    >>> from skbert import BertSentenceTransformer
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.pipeline import make_pipeline
    >>> texts = ["a gripping, beautiful film", "dull and far too long",
    ...          "a joy from start to finish", "i want those two hours back"]
    >>> pipe = make_pipeline(BertSentenceTransformer(pooling="mean"), LogisticRegression())
    >>> pipe.fit(texts, [1, 0, 1, 0]).predict(["what a lovely surprise"])  # doctest: +SKIP
    array([1])
    """

    #: a finished checkpointed fit reruns with another ``wise_alpha`` (applied after training)
    _NOT_IN_DATA_KEY = (*BertEstimatorBase._NOT_IN_DATA_KEY, "wise_alpha")

    _parameter_constraints: dict = {
        **BertEstimatorBase._parameter_constraints,
        **BertEstimatorBase._training_constraints,
        "normalize": ["boolean", StrOptions({"auto"})],
        "fine_tune": [fine_tune_constraint(FINE_TUNE_MODES)],
        "objective": [StrOptions({"auto", "cosine", "pair-softmax", "softmax", "contrastive"})],
        "contrastive_loss": [StrOptions(set(CONTRASTIVE_LOSSES))],
        "pairs_per_text": [Number(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "learning_rate": [Number(Real, 0, 1, closed="right"), StrOptions({"auto"})],
        "train_dropout": ["boolean"],
        "temperature": [Number(Real, 0, None, closed="neither")],
        "wise_alpha": [Number(Real, 0, 1, closed="both")],
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
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
        normalize="auto",
        fine_tune="none",
        objective="auto",
        contrastive_loss="batch-cosine",
        pairs_per_text="auto",
        temperature=0.1,
        train_dropout=True,
        wise_alpha=1.0,
        cnn_kernel_sizes=(1, 3, 5),
        cnn_channels=128,
        learning_rate="auto",
        layer_lr_decay=1.0,
        top_learning_rate=1e-3,
        head_learning_rate="deprecated",
        weight_decay=0.01,
        warmup_fraction=0.1,
        max_epochs=1,
        random_state=None,
        warm_start=False,
        checkpoint_dir=None,
        checkpoint_steps=500,
        batch_size=32,
        device="auto",
        precision="auto",
        memory=None,
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
        self.normalize = normalize
        self.fine_tune = fine_tune
        self.objective = objective
        self.contrastive_loss = contrastive_loss
        self.pairs_per_text = pairs_per_text
        self.temperature = temperature
        self.train_dropout = train_dropout
        self.wise_alpha = wise_alpha
        self.cnn_kernel_sizes = cnn_kernel_sizes
        self.cnn_channels = cnn_channels
        self.learning_rate = learning_rate
        self.layer_lr_decay = layer_lr_decay
        self.top_learning_rate = top_learning_rate
        self.head_learning_rate = head_learning_rate
        self.weight_decay = weight_decay
        self.warmup_fraction = warmup_fraction
        self.max_epochs = max_epochs
        self.random_state = random_state
        self.warm_start = warm_start
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_steps = checkpoint_steps
        self.batch_size = batch_size
        self.device = device
        self.precision = precision
        self.memory = memory
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Load the encoder and, unless ``fine_tune="none"``, train it on ``(X, y)``.

        The objective follows the data (or ``objective``). Sentence pairs with float y
        (scores) train cos(u, v) to match the scores scaled to [0, 1] by the training scores'
        minimum and maximum (SBERT's regression objective; STS-B's training set spans 0-5, so
        score / 5, but a subset or fold is scaled by its own range, and -1 becomes 0).
        Pairs with class labels (ints or strings) train a softmax on ``(u, v, |u - v|)``
        (SBERT's NLI objective). Single texts with class labels train a softmax on u.
        ``objective="contrastive"`` (asked for, never inferred) trains single texts with class
        labels, or a multi-label 0/1 indicator, SetFit-style: texts of a shared label to a
        cosine of 1, of none to 0, over every pair of batches of texts balanced by label
        (``contrastive_loss="batch-cosine"``), on drawn pairs as SetFit does (``"cosine"``),
        with a supervised contrastive loss (``"supcon"``), by ranking every positive pair
        of a batch above every negative one (``"cosent"``), or by pulling each text's
        farthest positive nearer than its nearest negative (``"batch-hard-triplet"``). The
        output layer is not part of the output: ``transform`` gives the trained sentence
        vectors.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs.
        y : array-like of shape (n_samples,) or (n_samples, n_labels), or None
            Scores or class labels (a 0/1 indicator matrix for ``objective="contrastive"``);
            ignored (and optional) when ``fine_tune="none"``.

        Returns
        -------
        self : BertSentenceTransformer
            The fitted transformer.

        Raises
        ------
        skbert.exceptions.TrainingDivergedError
            If the training loss or gradients become NaN or infinite (the message names the
            step and what to change).

        Notes
        -----
        All or nothing: if the fit fails or is interrupted (Ctrl-C), the estimator is left
        exactly as it was before (fitted or not).
        """
        with self._atomic_fit():
            self._fit(X, y)
        return self

    def _fit(self, X, y):
        first, second = check_texts(X)  # pairs: chunked or not, each side read alone here
        settings = resolve_training_settings(self.get_params(deep=False))
        trains = settings.trains
        continuing = trains and self.warm_start and "network_" in vars(self)
        self._start_fit(keep_learned=continuing, trains=trains)
        if not trains:
            warn_untrained_objective(self.objective, self.fine_tune, self.wise_alpha)
            if memory_location(self.memory, read_fine_tune(self.fine_tune)) is not None:
                fit_for_cache(self)
            else:
                self.network_ = self._build_encoder(trains=False)
        else:
            self._fit_objective(first, second, y, settings)
        self.normalize_ = resolve_normalize(self, continuing)
        self._n_features_out = self.readout_.output_dim
        record_column_names(self, X)

    # ------------------------------------------------------------------ training
    def _fit_objective(self, first, second, y, settings):
        objective = resolve_objective(self.objective, self.fine_tune, second, y)
        if objective == "cosine":
            y = check_scores(y, len(first))
        else:
            y, multilabel = check_class_labels(
                y,
                len(first),
                allow_multilabel=objective == "contrastive",
                estimator="BertSentenceTransformer",
                scored=False,  # a transformer: its labels only train
            )
        # warm_start keeps the fitted encoder; the output layer (and its classes or score
        # range) only when the objective is the same: NLI then STS-B is two fits.
        keep_encoder = "network_" in vars(self)  # _start_fit kept it: warm_start
        continuing = keep_encoder and getattr(self, "objective_", None) == objective
        if not continuing:
            self._forget("classes_", "score_range_", "output_layer_", "objective_")
        if objective == "cosine":
            if not continuing:
                self.score_range_ = (float(y.min()), float(y.max()))
            targets, n_classes = cosine_targets(y, self.score_range_), 0
        elif objective == "contrastive":  # no output layer: nothing learned of the labels
            refuse_split_batches(self.contrastive_loss)
            targets, n_classes = torch.as_tensor(label_codes(y, multilabel)), 0
        else:
            if not continuing:
                self.classes_ = np.unique(y)
            targets, n_classes = class_targets(y, self.classes_), len(self.classes_)
        checkpoint = self._checkpoint(first, second, targets.numpy(), objective=objective)
        seed = self._fit_seed(checkpoint)
        with seeded(seed):
            # a warm start trains copies: the fitted model stays as it is if the fit fails
            encoder = self._warm_start_network() if keep_encoder else self._build_encoder()
            output_layer = copy.deepcopy(self.output_layer_) if continuing else None
            network = SiameseNetwork(encoder, objective, n_classes, output_layer=output_layer)
        if settings.fine_tune == "top":
            refuse_untrainable_top(self.fine_tune, self.pooling, objective, network.encoder)
        # WiSE-FT: the pre-trained weights (or warm_start's fitted ones), to average back in
        start = starting_weights(self, encoder, settings.train_backbone)
        device, dtype = self._device_and_dtype(trained=network)
        enc_a = self._encode(first)
        enc_b = self._encode(second) if second is not None else None
        lengths = [len(rows[0][0]) for rows in enc_a.rows]
        if enc_b is not None:
            lengths = [a + len(rows[0][0]) for a, rows in zip(lengths, enc_b.rows, strict=True)]
        criterion = torch.nn.MSELoss() if objective == "cosine" else torch.nn.CrossEntropyLoss()

        def make_batches(rng):
            return length_grouped_batches(lengths, self.batch_size, rng)

        def loss_fn(net, batch):
            a = self._batch_tensors(enc_a, batch, device)
            b = self._batch_tensors(enc_b, batch, device) if enc_b is not None else None
            out = net(a, b)
            return criterion(out.float(), targets[batch].to(device))

        if objective == "contrastive":  # streamed pairs (or balanced texts), their own loss
            make_batches, loss_fn = contrastive_training(self, enc_a, targets.numpy(), device)

        config = training_config(
            self, settings, objective, len(first), encoder.backbone, device=device, dtype=dtype
        )
        history = train(
            network,
            loss_fn,
            make_batches,
            config,
            seed=seed,
            desc="Fine-tuning",
            checkpoint=checkpoint,
            data_key=self._launch_data_key(first, second, targets.numpy(), objective=objective),
        )
        average_back(self, start, network.encoder)
        self.network_ = network.encoder.eval()
        self.output_layer_ = None if network.output_layer is None else network.output_layer.cpu()
        self.objective_ = objective
        self.learning_rate_ = config.learning_rate
        self.loss_curve_ = history.loss_curve
        self.n_iter_ = history.n_iter

    def transform(self, X):
        """Encode texts (or sentence pairs) into vectors.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts, or sentence pairs encoded together as one input.

        Returns
        -------
        ndarray of shape (n_samples, n_features_out), float32
            One vector per text, in input order (L2-normalised when ``normalize_``).
        """
        check_is_fitted(self)
        first, second = check_texts(X)
        check_column_names(self, X)
        vectors = self._vectors(first, second)
        if self.normalize_:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.maximum(norms, np.finfo(np.float32).tiny)
        return vectors

    def _vectors(self, first, second=None) -> np.ndarray:
        """Unnormalised vectors, from the feature cache when ``memory`` is in force."""
        root = memory_location(self.memory, read_fine_tune(self.fine_tune))
        if root is not None and "objective_" not in vars(self):  # never a trained network's
            return cached_transform(self, first, second, root)
        return self._forward_all(first, second)

    def similarity(self, X):
        """Cosine similarity of the two sentences of each pair.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Sentence pairs; each sentence is encoded on its own (not as a joint input).

        Returns
        -------
        ndarray of shape (n_pairs,)
            The cosine of the two sentence vectors of each pair.
        """
        from .metrics import paired_cosine  # imports scipy: on first use

        check_is_fitted(self)
        first, second = check_texts(X)
        if second is None:
            raise ValueError("similarity takes sentence pairs: X must have 2 columns.")
        check_column_names(self, X)
        vectors = self._vectors(first + second)
        return paired_cosine(vectors[: len(first)], vectors[len(first) :])

    def score(self, X, y):
        """Spearman correlation between :meth:`similarity` and gold scores ``y``.

        The STS measure of Reimers & Gurevych (2019) and Choi et al. (2021); papers report it
        x 100. ``GridSearchCV(BertSentenceTransformer(...), ...)`` uses it by default.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Sentence pairs.
        y : array-like of shape (n_pairs,)
            Gold similarity scores.

        Returns
        -------
        float
            Spearman's rank correlation, in [-1, 1]; nan (with an ``UndefinedMetricWarning``)
            for a single pair, and nan (with scipy's ``ConstantInputWarning``) when all
            similarities or all gold scores are equal.

        Raises
        ------
        NotFittedError
            If the estimator is not fitted.
        ValueError
            If ``y`` holds NaN or infinite scores, or its length differs from X's.
        """
        from .metrics import sts_spearman_scorer  # imports scipy: on first use

        return sts_spearman_scorer(self, X, y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # the input is text and the output always float32: no input dtype is preserved
        tags.transformer_tags.preserves_dtype = []
        return tags
