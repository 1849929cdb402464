"""Embed, classify or score a corpus held in a Dask collection, partition by partition on the
workers.

Needs the ``dask`` extra (``pip install "skbert[dask]"``: dask's dataframe and its
distributed scheduler); skbert itself imports without it.

.. code-block:: python

    import dask.dataframe as dd
    from dask.distributed import Client
    from skbert.dask import transform

    client = Client()                                # or Client("scheduler-address")
    texts = dd.read_parquet("corpus/")["text"]      # millions of texts
    vectors = transform(fitted_estimator, texts)    # lazy: a dask DataFrame
    vectors.to_parquet("vectors/")                  # computed on the workers

The fitted estimator is not pickled per task. With a distributed client, ``transform``
pickles it once and sends it to the scheduler as the input of one task that unpickles it on a
worker; the other workers fetch it from there when they need it, and the scheduler keeps the
pickled bytes (the estimator's size) while the collection is alive, so that it can run that
task again should every worker holding the estimator be lost: computing the collection again
then works. Such a collection must be computed on the client that was active when
``transform`` was called (``compute()`` without ``scheduler=``); a local scheduler cannot
reach the estimator there (Dask's ``Missing dependency skbert.dask-...`` error). With no
client, the estimator is one ``dask.delayed`` value that every partition's task depends on
(pickled with each task's inputs by the ``"processes"`` scheduler only: prefer a client).
Rows keep the input's order and index, partition by partition. Each vector is the one
``estimator.transform`` gives on one machine, bit for bit, as float32 (skbert's own dtype; a
pipeline whose last step gives float64 is cast to float32): skbert computes every text in
shapes that depend only on its own length (see the user guide), so how texts are split into
partitions changes nothing. A worker on another kind of CPU may differ in the last bits, as
any two CPUs do.

Threads: Dask's worker processes start with one BLAS/OpenMP thread per process (its nanny
sets ``OMP_NUM_THREADS=1`` and the like), so each task runs skbert on one core, and a worker
with ``nthreads=k`` runs ``k`` partitions at once: one core per task slot. ``threads=`` gives
each task more cores instead (use it with ``nthreads=1`` workers). On a machine with several
GPUs, start one worker per GPU (``CUDA_VISIBLE_DEVICES`` set per worker, ``nthreads=1``) and
fit the estimator with ``device="auto"``: each task then predicts on its worker's GPU.
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
from numbers import Integral

import numpy as np
from sklearn.utils.validation import check_is_fitted

try:
    import dask
    import dask.dataframe as dd
    import pandas as pd
    from sklearn.base import is_regressor
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        f"skbert.dask needs Dask's dataframe: pip install 'skbert[dask]' (import failed: {error})"
    ) from error

from ._estimator.base import BertEstimatorBase

__all__ = ["predict", "predict_proba", "transform"]

_METHODS = ("transform", "predict", "predict_proba")


def transform(estimator, texts, *, threads: int | None = None):
    """``estimator.transform`` of every text of a Dask collection, on the workers.

    Parameters
    ----------
    estimator : fitted estimator
        A skbert estimator or a scikit-learn :class:`~sklearn.pipeline.Pipeline` that takes
        texts (anything with ``transform`` and ``get_feature_names_out``).
    texts : dask.dataframe.Series or dask.dataframe.DataFrame
        One text per row, or two columns of sentence pairs (first, second).
    threads : int, optional
        Torch threads per task (restored after it); default: what the worker has (one core
        per task on Dask's worker processes).

    Returns
    -------
    dask.dataframe.DataFrame
        One row per text, the input's index, float32 columns named by
        ``estimator.get_feature_names_out()`` (a pipeline whose last step gives another
        dtype, float64 say, is cast to float32).
    """
    return _map(estimator, texts, "transform", threads)


def predict(estimator, texts, *, threads: int | None = None):
    """``estimator.predict`` of every text of a Dask collection, on the workers.

    Parameters
    ----------
    estimator : fitted estimator
        A classifier or a regressor that takes texts: a :class:`~skbert.BertTextClassifier`
        (``predict`` and ``classes_``), a :class:`~skbert.BertTextRegressor`, or a pipeline
        ending in one or in a scikit-learn classifier, regressor or clusterer (``KMeans``:
        each text's cluster). A multilabel classifier's predictions are 2-D: use
        :func:`predict_proba` instead.
    texts : dask.dataframe.Series or dask.dataframe.DataFrame
        One text per row, or two columns of sentence pairs (first, second).
    threads : int, optional
        Torch threads per task (restored after it); default: what the worker has.

    Returns
    -------
    dask.dataframe.Series or dask.dataframe.DataFrame
        The predicted label (for a regressor the float64 value, for a clusterer the cluster,
        of its ``labels_`` dtype) of each text, named
        ``"prediction"``, with the input's index; for a regressor fitted on a 2-D y (a
        multi-output :class:`~skbert.BertTextRegressor`, or a pipeline ending in a
        scikit-learn regressor), a DataFrame of one float64 column per output, named ``"0"``,
        ``"1"``, ...
    """
    return _map(estimator, texts, "predict", threads)


def predict_proba(estimator, texts, *, threads: int | None = None):
    """``estimator.predict_proba`` of every text of a Dask collection, on the workers.

    Parameters
    ----------
    estimator : fitted estimator
        A classifier that takes texts, with ``predict_proba`` and ``classes_``.
    texts : dask.dataframe.Series or dask.dataframe.DataFrame
        One text per row, or two columns of sentence pairs (first, second).
    threads : int, optional
        Torch threads per task (restored after it); default: what the worker has.

    Returns
    -------
    dask.dataframe.DataFrame
        One float64 column per class (named by ``str`` of ``classes_``), the input's index:
        ``predict_proba``'s rows, bit for bit.
    """
    return _map(estimator, texts, "predict_proba", threads)


def _map(estimator, texts, method, threads):
    if not isinstance(texts, (dd.Series, dd.DataFrame)):
        raise TypeError(
            f"texts must be a dask.dataframe Series (one text per row) or a 2-column "
            f"DataFrame (sentence pairs); got {type(texts).__name__}. A dask.bag converts "
            "with bag.to_dataframe(columns=['text'])['text']."
        )
    if isinstance(texts, dd.DataFrame) and len(texts.columns) != 2:
        raise ValueError(
            f"a DataFrame of texts must have 2 columns (first and second sentence of each "
            f"pair); got {len(texts.columns)}: {list(texts.columns)}."
        )
    if threads is not None and (
        not isinstance(threads, Integral) or isinstance(threads, bool) or threads < 1
    ):
        raise ValueError(f"threads must be a positive int or None; got {threads!r}.")
    threads = None if threads is None else int(threads)
    if not hasattr(estimator, method):
        raise TypeError(f"{type(estimator).__name__} has no {method}(); cannot map it.")
    check_is_fitted(estimator)  # on the client, not in each task
    final = estimator.steps[-1][1] if hasattr(estimator, "steps") else estimator
    if method == "predict" and getattr(final, "multilabel_", False):
        raise ValueError(
            f"predict of a multi-label {type(final).__name__} gives a 0/1 matrix, not one "
            "label per text; use skbert.dask.predict_proba (and a threshold) instead."
        )
    _check_outputs(estimator, final, method)
    meta = _meta(estimator, method)
    shipped = _shipped(estimator)
    columns = list(meta.columns) if meta.ndim == 2 else None
    dtype = meta.dtypes.iloc[0] if meta.ndim == 2 else meta.dtype
    return texts.map_partitions(_run_partition, shipped, method, threads, columns, dtype, meta=meta)


def _check_outputs(estimator, final, method):
    """Refuse, before anything is computed, an estimator whose ``predict`` or
    ``predict_proba`` does not give one label, value or row of probabilities per text."""
    if method == "transform" or (method == "predict" and is_regressor(estimator)):
        return
    if method == "predict" and _is_clusterer(final):  # one cluster per text
        return
    supported = (
        "supported: a classifier fitted on a 1-D y (predict, predict_proba), a regressor or "
        "a clusterer (predict), a multi-label BertTextClassifier (predict_proba), or "
        "skbert.dask.transform for any transformer"
    )
    classes = getattr(estimator, "classes_", None)  # a pipeline's is its last step's
    if classes is None:
        raise TypeError(
            f"{method} needs a classifier with classes_ (or, for predict, a regressor or a "
            f"clusterer) as the estimator or the last step of its pipeline; got "
            f"{type(final).__name__}, which is none of them; {supported}."
        )
    if len(classes) and np.ndim(classes[0]) > 0:  # one array of classes per output
        raise ValueError(
            f"{method} of {type(final).__name__} fitted on a 2-D y (multi-output, "
            f"{len(classes)} outputs) gives several labels per text, not one; {supported}."
        )


def _shipped(estimator):
    """The estimator as the tasks receive it: with a distributed client, the future of one
    task that unpickles it on a worker (its pickled bytes, sent once, stay on the scheduler,
    which can run the task again if the workers holding the estimator are lost; scattered
    data could not be recovered); otherwise one ``dask.delayed`` value in the graph."""
    try:
        from distributed import get_client

        client = get_client()
    except (ImportError, ValueError):  # no distributed, or no client: local schedulers
        return dask.delayed(estimator, pure=True, traverse=False)
    from distributed.protocol import pickle

    payload = pickle.dumps(estimator)  # bytes: the scheduler holds them without unpickling
    key = f"skbert.dask-{type(estimator).__name__}-{uuid.uuid4().hex}"
    with warnings.catch_warnings():  # sent once here, not with each graph: as intended
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        return client.submit(_unpickled, payload, key=key, pure=False)


def _unpickled(payload):
    """The estimator, on the worker that runs this task."""
    from distributed.protocol import pickle

    return pickle.loads(payload)


def _meta(estimator, method):
    """An empty frame of the output's columns and dtypes (Dask's ``meta``)."""
    if method == "transform":
        names = [str(n) for n in estimator.get_feature_names_out()]
        return pd.DataFrame({n: pd.Series(dtype=np.float32) for n in names})
    if method == "predict" and is_regressor(estimator):
        final = estimator.steps[-1][1] if hasattr(estimator, "steps") else estimator
        outputs = _outputs(final)
        if outputs is not None:  # fitted on a 2-D y
            return pd.DataFrame({str(i): pd.Series(dtype=np.float64) for i in range(outputs)})
        return pd.Series(np.empty(0, dtype=np.float64), name="prediction")
    final = estimator.steps[-1][1] if hasattr(estimator, "steps") else estimator
    if method == "predict" and _is_clusterer(final):  # its labels_' dtype (KMeans: int32)
        dtype = np.asarray(getattr(final, "labels_", np.empty(0, dtype=np.int64))).dtype
        return pd.Series(np.empty(0, dtype=dtype), name="prediction")
    classes = np.asarray(estimator.classes_)
    if method == "predict":  # the dtype pandas gives the labels (str for strings, in pandas 3)
        return pd.Series(classes, name="prediction").iloc[:0]
    # float64, as predict_proba gives them (float32 made them differ from it in the last bits)
    return pd.DataFrame({str(c): pd.Series(dtype=np.float64) for c in classes})


def _is_clusterer(estimator) -> bool:
    """Whether ``estimator`` is a clusterer (``KMeans``, ...): its tags' estimator type
    (scikit-learn >= 1.6), else its ``_estimator_type``."""
    try:
        from sklearn.utils import get_tags

        return get_tags(estimator).estimator_type == "clusterer"
    except (ImportError, AttributeError):
        return getattr(estimator, "_estimator_type", None) == "clusterer"


def _outputs(regressor):
    """The number of outputs of a regressor fitted on a 2-D y, or None for a 1-D y: a
    BertTextRegressor's ``multioutput_``; for a scikit-learn regressor at the end of a
    pipeline, the shape of its prediction of one row of zeros (its ``n_features_in_``)."""
    if hasattr(regressor, "multioutput_"):
        return regressor.n_outputs_ if regressor.multioutput_ else None
    features = getattr(regressor, "n_features_in_", None)
    if features is None:  # nothing to probe it with: one output
        return None
    predicted = np.asarray(regressor.predict(np.zeros((1, features))))
    return predicted.shape[1] if predicted.ndim == 2 else None


def _run_partition(part, estimator, method, threads, columns, dtype):
    """One partition's output, as a pandas object with the partition's index (columns of
    ``dtype``)."""
    first = estimator.steps[0][1] if hasattr(estimator, "steps") else estimator
    if isinstance(first, BertEstimatorBase):  # pandas rows: an error names the index label
        X = part
    elif isinstance(part, pd.DataFrame):  # a step of the user's: the lists it got before
        X = list(zip(part.iloc[:, 0].tolist(), part.iloc[:, 1].tolist(), strict=True))
    else:
        X = part.tolist()
    if not len(X):
        result = np.empty((0, len(columns)) if columns is not None else 0, dtype=np.float64)
    else:
        with _torch_threads(threads):
            result = getattr(estimator, method)(X)
    # every partition, an empty one too, of the meta's dtype: parquet wants one per column
    if columns is None:
        values = result if len(result) else []
        return pd.Series(values, index=part.index, name="prediction", dtype=dtype)
    return pd.DataFrame(np.asarray(result, dtype=dtype), index=part.index, columns=columns)


@contextlib.contextmanager
def _torch_threads(threads):
    if threads is None:
        yield
        return
    from ._core.threads import torch_threads

    with torch_threads(threads):  # partitions run in threads of one worker at once
        yield
