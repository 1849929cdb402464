"""An estimator's pickle (``pickle``, ``joblib.dump``, ``copy.deepcopy``), without torch's.

A pickle runs code when it is loaded: ``save()`` / :func:`skbert.load` is the safe format.
The network is pickled as that format stores it (a JSON description and safetensors bytes,
on the CPU: :func:`~skbert._nn.state.network_to_state`), and so is a ``torch.nn.Linear``
attribute (a softmax objective's ``output_layer_``), so that unpickling them runs no code from
the bytes (no ``torch.load``) and a model fitted on a GPU unpickles on a CPU-only machine.

A ``memory=`` fit whose ``fit`` deferred loading the encoder carries its weights too (as
``save()`` writes them), so the pickle unpickles where the model folder is not; the copy keeps
them in its prediction cache, as the estimator would once loaded. The feature cache's key of
the loaded weights travels with them where it is known without hashing
(:func:`~skbert._estimator.feature_memory.weights_key`): a copy of weights changed in place
since they were keyed hashes them anew instead of reading the vectors of the old ones.
"""

from __future__ import annotations

import warnings

import torch

from .._core.messages import user_stacklevel
from .._nn.state import (
    LINEAR_FORMAT,
    linear_from_state,
    linear_to_state,
    network_from_state,
    network_to_state,
)
from .feature_memory import record_weights_key, weights_key
from .prediction_cache import prediction_cache, remembered

__all__ = ["pickled_state", "unpickled_state"]

#: the pickle's entry of a deferred encoder's weights (the copy's prediction cache gets them)
_DEFERRED_WEIGHTS = "__deferred_network_weights"
#: the pickle's entry of the feature cache's key of the loaded weights, where known
_WEIGHTS_KEY = "__feature_cache_weights_key"


def pickled_state(estimator, state: dict) -> dict:
    """``state`` (a copy of the estimator's ``__dict__``) as the pickle stores it."""
    key = weights_key(estimator) if "feature_fingerprint_" in state else None
    if "network_" not in state and "deferred_network_" in state:
        deferred, kept = state["deferred_network_"], prediction_cache(estimator).network
        try:
            if kept is not None and kept[0] is deferred:
                network = kept[2]
            else:  # the folder's weights, loaded now: its key is fit's
                network, key = deferred.load(), state["feature_fingerprint_"]
        except (OSError, RuntimeError) as exc:  # the folder is gone or changed
            warnings.warn(
                f"pickling a memory= fit whose encoder is not loaded, and its model folder "
                f"cannot be loaded now ({exc}); the pickle refers to the folder and works "
                "only where that folder is as fit read it (texts in the feature cache "
                "transform without it).",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        else:
            state[_DEFERRED_WEIGHTS] = network_to_state(network)
    if "network_" in state:
        state["network_"] = network_to_state(state["network_"])
    for name, value in state.items():  # a softmax objective's output_layer_
        if type(value) is torch.nn.Linear:
            state[name] = linear_to_state(value)
    if key is not None:
        state[_WEIGHTS_KEY] = key
    return state


def unpickled_state(estimator, state: dict) -> tuple:
    """``(state to set, finish)``: ``finish()``, called once the state is set, gives the
    estimator its deferred encoder's weights and their key."""
    state = dict(state)
    if "network_" in state:
        state["network_"] = network_from_state(state["network_"])
    for name, value in state.items():
        if isinstance(value, dict) and value.get("format") == LINEAR_FORMAT:
            state[name] = linear_from_state(value, name)
    weights = state.pop(_DEFERRED_WEIGHTS, None)
    key = state.pop(_WEIGHTS_KEY, None)

    def finish():
        network = state.get("network_")
        if weights is not None:
            network = network_from_state(weights)
            remembered(estimator, "network", estimator.deferred_network_, lambda: network)
        if key is not None and network is not None:
            record_weights_key(estimator, network, key)

    return state, finish
