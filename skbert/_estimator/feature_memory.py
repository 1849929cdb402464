"""The estimator side of ``BertSentenceTransformer(memory=...)``: where the frozen-feature
cache is, what a fit with it learns, and vectors read through it.

The store (:mod:`skbert._storage.feature_cache`) keeps vectors under a key; this module
gives it the key of a fitted estimator (its model's fingerprint, read-out, device type,
precision and, on the CPU, attention kernel) and the encoder's forward pass for the texts it
misses. Used by :class:`~skbert.sentence.BertSentenceTransformer`.
"""

from __future__ import annotations

import os

import numpy as np
from sklearn.utils.validation import check_memory

from .._core.messages import report
from .._inference.cpu.attention import attention_kind
from .._inference.cpu.products import products_for_this_cpu
from .._inference.int8 import int8_kind
from .._nn.backbone import load_tokenizer_and_config, local_directory
from .._nn.network import weights_version
from .._storage.feature_cache import cache_key, cached_vectors, get_store, text_digests
from .._storage.fingerprint import directory_fingerprint, state_fingerprint
from ..exceptions import FeatureCacheError
from .deferred import DeferredNetwork
from .model_source import fitted_encoder_source
from .prediction_cache import prediction_cache, remembered

__all__ = [
    "memory_location",
    "fit_for_cache",
    "cached_transform",
    "record_weights_key",
    "weights_key",
]


def memory_location(memory, fine_tune_mode: str):
    """The cache directory of ``memory`` in force, or None (no ``memory``, or training).

    A leading ``~`` (``"~/skbert-cache"``) is the home folder, as for ``save``.
    """
    if memory is None or fine_tune_mode != "none":
        return None
    memory = os.fspath(memory) if isinstance(memory, os.PathLike) else memory
    if memory == "":  # joblib reads '' as the working directory: files written there
        raise ValueError(
            "memory='' is not a folder path; give a folder for the feature cache (created if "
            "missing), or memory=None."
        )
    if isinstance(memory, str):
        memory = os.path.expanduser(memory)  # else a folder named "~" in the working one
        if os.path.exists(memory) and not os.path.isdir(memory):
            raise FeatureCacheError(
                f"memory={memory!r} is a file, not a folder: the feature cache is a folder of "
                "its own. Pass a folder path (it is created if missing), or memory=None."
            )
    location = check_memory(memory).location
    return None if location is None else os.path.expanduser(os.fspath(location))


def fit_for_cache(estimator) -> None:
    """``fit`` with a cache: fingerprint the model; defer loading its weights until a text is
    missing from the cache (:meth:`~skbert._estimator.base.BertEstimatorBase.fitted_network`
    loads them then).

    Sets the read-out state, ``feature_fingerprint_``, and ``deferred_network_`` or, for a
    fitted estimator or a model that is not in a local folder, ``network_``.
    """
    model = estimator.model
    directory = None if fitted_encoder_source(model) else local_directory(model)
    if directory is not None:
        tokenizer, config = load_tokenizer_and_config(directory)
        estimator._resolve_readout(tokenizer, config, trains=False)
        fingerprint = directory_fingerprint(directory)
        estimator.feature_fingerprint_ = fingerprint
        folder = os.path.abspath(directory)
        estimator.deferred_network_ = DeferredNetwork(folder, fingerprint, estimator.readout_)
    else:  # a fitted estimator, or a model that is not in a local folder
        network = estimator.network_ = estimator._build_encoder(trains=False)
        fingerprint = state_fingerprint(network.backbone, estimator.tokenizer_)
        estimator.feature_fingerprint_ = fingerprint
        record_weights_key(estimator, network, fingerprint)  # the weights it hashed


def _loaded_network(estimator):
    """The fitted network if its weights are loaded (``network_``, or the encoder whose
    loading fit deferred, once loaded), else None."""
    fitted = vars(estimator)
    if "network_" in fitted:
        return fitted["network_"]
    kept = prediction_cache(estimator).network  # (deferred network, None, network)
    if kept is not None and kept[0] is fitted.get("deferred_network_"):
        return kept[2]
    return None


def record_weights_key(estimator, network, fingerprint) -> None:
    """Record that ``fingerprint`` is the key of ``network``'s weights as they are now: where
    fit hashed them, where they were loaded (a deferred encoder from its folder, a network
    unpickled with :func:`weights_key`'s answer), or moved by a transform."""
    prediction_cache(estimator).fingerprint = (network, weights_version(network), fingerprint)


def weights_key(estimator):
    """The cache key of the loaded network's weights as they are now, if it is known without
    hashing them (recorded, and no weight changed since), else None: what a pickle carries,
    so that a copy of unchanged weights keeps reading the cache under their key, and one of
    weights changed in place hashes them."""
    network = _loaded_network(estimator)
    kept = prediction_cache(estimator).fingerprint
    if network is None or kept is None or kept[0] is not network:
        return None
    return kept[2] if kept[1] == weights_version(network) else None


def _model_fingerprint(estimator) -> str:
    """The model part of the cache key: ``feature_fingerprint_`` while the weights are not
    loaded (the folder's, as fit hashed them) or are the ones recorded under it (at the fit
    or the load that made them), else a hash of the loaded weights, made again whenever their
    :func:`~skbert._nn.network.weights_version` changes (``load_state_dict`` in place)."""
    fingerprint = vars(estimator).get("feature_fingerprint_")
    if fingerprint is None:  # fitted before `memory` was set
        network = estimator.fitted_network()
    else:
        network = _loaded_network(estimator)
        if network is None:  # the folder's weights, not loaded: as fit hashed them
            return fingerprint
    return remembered(
        estimator,
        "fingerprint",
        network,
        lambda: state_fingerprint(network.backbone, estimator.tokenizer_),
        key=weights_version(network),  # weights loaded in place: hashed again
    )


def cached_transform(estimator, first, second, root) -> np.ndarray:
    """Vectors of the texts from the feature cache in ``root``, encoding (and storing) the
    missing ones with ``estimator``'s network."""
    fingerprint = _model_fingerprint(estimator)
    current = weights_key(estimator) == fingerprint  # or not loaded: loaded if needed
    device, dtype = estimator._device_and_dtype(inference=True)
    readout = estimator.readout_
    precision = int8_kind() if estimator._int8_runs(device) else dtype
    on_cpu = device.type == "cpu"
    context = {
        "model": fingerprint,
        "device": device.type,
        "precision": precision,
        "attention": attention_kind() if on_cpu else None,
        "products": products_for_this_cpu().name if on_cpu else None,
    }

    def compute(positions, all_layers):
        return estimator._forward_all(
            [first[i] for i in positions],
            None if second is None else [second[i] for i in positions],
            all_layers=all_layers,
        )

    store = get_store(root, cache_key(readout, **context))
    digests = text_digests(first, second)
    vectors, n_missing, n_encoded = cached_vectors(store, digests, readout, compute)
    network = _loaded_network(estimator)
    if network is not None and (current or weights_key(estimator) is None):
        # moved to the device, or loaded, by this call (weights_version counts storages):
        # the same weights, under the same key
        record_weights_key(estimator, network, fingerprint)
    if estimator.verbose:
        n = len(first)
        repeats = n_missing - n_encoded
        report(
            f"{type(estimator).__name__}: {n - n_missing} of {n} texts read from the feature "
            f"cache, {n_encoded} encoded"
            + (f", {repeats} repeats of texts encoded in this call." if repeats else ".")
        )
    return vectors
