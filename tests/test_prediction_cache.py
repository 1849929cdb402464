"""The speed caches of predictions, kept outside the estimators
(skbert._estimator.prediction_cache): one per estimator object, made once per source and key,
emptied by a fit but for the warned device, gone with its estimator."""

import gc
import weakref

from skbert import BertSentenceTransformer
from skbert._estimator.prediction_cache import (
    PredictionCache,
    forget_fit,
    prediction_cache,
    remembered,
)


def test_one_cache_per_estimator_object():
    a, b = BertSentenceTransformer(), BertSentenceTransformer()
    assert prediction_cache(a) is prediction_cache(a)
    assert prediction_cache(a) is not prediction_cache(b)
    assert prediction_cache(a) == PredictionCache()  # empty on first use
    assert vars(a) == BertSentenceTransformer().__dict__  # nothing stored on the estimator


def test_remembered_makes_once_per_source_and_key():
    est = BertSentenceTransformer()
    made = []

    def make():
        made.append(object())
        return made[-1]

    source, other = object(), object()
    first = remembered(est, "low_precision", source, make, key=("cpu", "bf16"))
    assert remembered(est, "low_precision", source, make, key=("cpu", "bf16")) is first
    assert len(made) == 1
    # another key (==) or another source (is) makes it again
    assert remembered(est, "low_precision", source, make, key=("cpu", "fp16")) is made[1]
    assert remembered(est, "low_precision", other, make, key=("cpu", "fp16")) is made[2]
    assert remembered(est, "network", other, make) is made[3]  # entries are apart
    assert prediction_cache(est).low_precision == (other, ("cpu", "fp16"), made[2])


def test_forget_fit_empties_all_but_the_warned_device():
    est = BertSentenceTransformer()
    for entry in ("network", "low_precision", "fingerprint"):
        remembered(est, entry, "source", object)
    prediction_cache(est).warned_device = "cuda"
    forget_fit(est)
    assert prediction_cache(est) == PredictionCache(warned_device="cuda")
    untouched = BertSentenceTransformer()
    forget_fit(untouched)  # an estimator that never predicted: nothing to forget
    assert prediction_cache(untouched) == PredictionCache()


def test_the_cache_goes_with_its_estimator():
    est, network = BertSentenceTransformer(), object()  # the source: what the estimator holds
    remembered(est, "fingerprint", network, lambda: "key")
    cache = weakref.ref(prediction_cache(est))
    del est
    gc.collect()
    assert cache() is None
