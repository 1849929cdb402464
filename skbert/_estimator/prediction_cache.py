"""What an estimator's predictions compute once and reuse, kept outside the estimator.

Predicting (``transform``, ``predict``, ``predict_proba``, ``decision_function``, ``score``,
``similarity``) changes no attribute of a fitted estimator: what it would otherwise store on
the estimator lives in one :class:`PredictionCache` per estimator object, here:

- ``network``: the encoder of a fit that deferred loading it
  (:class:`~skbert._estimator.deferred.DeferredNetwork`), once loaded;
- ``low_precision``: the bf16 (or fp16) copy of the network that inference runs
  (``precision``), for one device and dtype;
- ``fingerprint``: the feature-cache key of a model fitted before ``memory`` was set;
- ``warned_device``: the ``device`` whose fall-back to the CPU was last warned about (once
  per estimator and device);
- ``warned_int8``: whether the fall-back of ``precision="int8"`` to float32 was warned about
  (once per estimator and fit). The int8 weights themselves are kept with the tiled layers'
  plan of the fitted encoder (:mod:`skbert._inference.int8`), not here: no copy is made.

Lifetime: a cache belongs to one estimator object and goes with it (the estimator is a weak
key); it is never part of the estimator: not in ``vars``, ``get_params``, a pickle, a
``save`` or a copy, so a copy, a clone, an unpickled or a loaded estimator starts with an
empty one, but for one entry: a pickle (or copy) of a fit that deferred loading its encoder
carries the encoder's weights, and the unpickled estimator starts with them as ``network``
(so that it works where the model folder is not). ``fit`` empties it but for
``warned_device`` (:func:`forget_fit`), so the bf16 copy is kept until the next fit. Each
entry also records the object it was made from (the network, the deferred encoder) and is
made anew when that is no longer the estimator's.

Used by :class:`~skbert._estimator.base.BertEstimatorBase` and
:mod:`skbert._estimator.feature_memory`.
"""

from __future__ import annotations

import dataclasses
import weakref

__all__ = [
    "PredictionCache",
    "prediction_cache",
    "forget_fit",
    "kept_cache",
    "restore_cache",
    "remembered",
]


@dataclasses.dataclass
class PredictionCache:
    """The prediction caches of one estimator; entries are ``(source, key, value)`` or None."""

    network: tuple | None = None
    low_precision: tuple | None = None
    fingerprint: tuple | None = None
    warned_device: str | None = None
    warned_int8: bool = False


#: estimator object -> its PredictionCache; an entry goes when its estimator does
_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def prediction_cache(estimator) -> PredictionCache:
    """The :class:`PredictionCache` of ``estimator`` (a new, empty one on first use)."""
    cache = _CACHES.get(estimator)
    if cache is None:
        cache = _CACHES[estimator] = PredictionCache()
    return cache


def forget_fit(estimator) -> None:
    """Drop what ``estimator``'s previous fit made (``fit`` calls it); keep the warned device."""
    cache = _CACHES.get(estimator)
    if cache is not None:
        _CACHES[estimator] = PredictionCache(warned_device=cache.warned_device)


def kept_cache(estimator):
    """``estimator``'s cache as it is now (or None), for :func:`restore_cache`."""
    return _CACHES.get(estimator)


def restore_cache(estimator, cache) -> None:
    """Give ``estimator`` back the ``cache`` :func:`kept_cache` returned (a failed fit leaves
    the predictions' caches as they were: a ``memory=`` fit unpickled where its model folder
    is not keeps its weights there only)."""
    if cache is None:
        _CACHES.pop(estimator, None)
    else:
        _CACHES[estimator] = cache


def remembered(estimator, entry: str, source, make, key=None):
    """``make()``, made once per ``source`` and ``key`` and kept in ``estimator``'s cache.

    Parameters
    ----------
    estimator : BertEstimatorBase
        Whose cache.
    entry : {"network", "low_precision", "fingerprint"}
        The entry of :class:`PredictionCache`.
    source : object
        What the value is made from (compared with ``is``): a value made from another object
        is made again.
    make : callable
        Makes the value, without arguments.
    key : hashable, optional
        What else the value depends on (compared with ``==``), such as the device and dtype.
    """
    cache = prediction_cache(estimator)
    kept = getattr(cache, entry)
    if kept is None or kept[0] is not source or kept[1] != key:
        kept = (source, key, make())
        setattr(cache, entry, kept)
    return kept[2]
