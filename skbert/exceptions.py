"""Exceptions that skbert raises besides the built-in ones."""

from __future__ import annotations

__all__ = ["FeatureCacheError", "FeatureCacheWarning", "TrainingDivergedError"]


class TrainingDivergedError(FloatingPointError):
    """Training produced a non-finite loss, gradient, weight or validation score.

    Raised by ``fit`` (and by :func:`~skbert.pretraining.further_pretrain`) at the step where
    the value first stops being finite, instead of returning a model with NaN or infinite
    weights. The message names the step, the epoch and the value, and what to try: a lower
    ``learning_rate`` or ``top_learning_rate``, or ``precision="fp32"`` when training ran in
    reduced precision.

    It is a :class:`FloatingPointError`, so ``except ArithmeticError`` catches it too.

    See Also
    --------
    skbert.BertTextClassifier : Fine-tuning that may raise it.
    skbert.BertSentenceTransformer : Siamese fine-tuning that may raise it.

    Examples
    --------
    >>> from skbert.exceptions import TrainingDivergedError
    >>> issubclass(TrainingDivergedError, ArithmeticError)
    True
    """


class FeatureCacheError(OSError):
    """The feature cache folder (``memory=``) cannot be used at all.

    For instance a file where the folder should be, no permission to write, or a full disk.
    The message names the folder; it only holds vectors that can be computed again, so it can
    be deleted (or ``memory=None`` used).
    """


class FeatureCacheWarning(UserWarning):
    """A damaged shard of the feature cache was found, deleted and its texts encoded again.

    Every shard is checked (sizes, headers, checksum) before its first use in a process; the
    message names the shard, the cache folder and what was wrong.
    """
