"""A network as plain data: a JSON description and its tensors, the one format networks are
stored in.

:func:`describe_network` gives ``(description, tensors)`` for a
:class:`~skbert._nn.network.SentenceEncoder` or :class:`~skbert._nn.network.TaskNetwork`: the kind,
the :class:`~skbert._nn.readout.Readout` (tagged JSON, :mod:`skbert._storage.tagged_json`), the
backbone's class, model type, attention implementation and full ``config.to_dict()``, and for a task
network its outputs and dropout; :func:`build_network` rebuilds the network from them with the
classes of :mod:`skbert._nn.network` and ``transformers.AutoModel.from_config`` (no code of the
checkpoint's own, nothing unpickled). A save (:mod:`skbert._estimator.persistence`) writes the
tensors to a safetensors file beside the description; an estimator's pickle
(``BertEstimatorBase.__getstate__``) stores :func:`network_to_state`, the description as JSON
text and the tensors as safetensors bytes, so that a model fitted on a GPU unpickles on a
CPU-only machine and unpickling it runs no code.

Networks are not pickled on their own: an estimator's pickle goes through this format, and
``copy.deepcopy`` of a network (warm starts, the bf16 copy of prediction) is a plain deep copy.
"""

from __future__ import annotations

import json

import torch

from .._core.rng import forked
from .._storage.tagged_json import ValueReader, ValueWriter, as_int
from .backbone import float32_weights, quiet_loading
from .network import SentenceEncoder, TaskNetwork
from .readout import Readout

__all__ = [
    "NETWORK_FORMAT",
    "NETWORK_FORMAT_VERSION",
    "network_to_state",
    "network_from_state",
    "describe_network",
    "build_network",
    "cpu_tensors",
    "load_tensors",
    "LINEAR_FORMAT",
    "linear_to_state",
    "linear_from_state",
]

NETWORK_FORMAT = "skbert-network"
#: raise it when the description changes; :func:`build_network` refuses other versions
NETWORK_FORMAT_VERSION = 1
#: the format of a ``torch.nn.Linear`` attribute in an estimator's pickle
LINEAR_FORMAT = "skbert-linear"


def network_to_state(network) -> dict:
    """``network`` as plain data: its JSON description and its tensors as safetensors bytes.

    The value the estimators pickle in place of ``network_``; unpickling it runs no code but
    :func:`network_from_state`.

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        On any device; its tensors are copied to the CPU.

    Returns
    -------
    dict
        ``{"format", "description" (JSON text), "tensors" (safetensors bytes)}``.
    """
    from safetensors.torch import save as safetensors_bytes

    description, tensors = describe_network(network, "network_")
    return {
        "format": NETWORK_FORMAT,
        "description": json.dumps(description, allow_nan=False),
        "tensors": safetensors_bytes(tensors),
    }


def network_from_state(state):
    """The network that :func:`network_to_state` described, rebuilt on the CPU.

    Parameters
    ----------
    state : dict
        As returned by :func:`network_to_state`.

    Returns
    -------
    SentenceEncoder or TaskNetwork
        In eval mode, float32.

    Raises
    ------
    ValueError
        For bytes (the format of earlier skbert pickles, a ``torch.save`` of the module,
        which only ``torch.load(weights_only=False)`` reads: it is refused, as it would run
        any code stored in it) and for a state that is not a network's.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load as tensors_from_bytes

    if isinstance(state, (bytes, bytearray)):
        raise ValueError(
            "network_ holds bytes of the pickle format of an earlier skbert (a torch.save of "
            "the network), which only torch.load(weights_only=False) reads, running any code "
            "stored in it; skbert refuses it. Refit the estimator, or load the pickle with the "
            "skbert version that wrote it, if you trust it, and save() it."
        )
    if not isinstance(state, dict) or state.get("format") != NETWORK_FORMAT:
        raise ValueError(f"network_ is a {type(state).__name__}, not a pickled skbert network")
    try:
        tensors = tensors_from_bytes(bytes(state["tensors"]))
        description = json.loads(state["description"])
    except (SafetensorError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"network_ is corrupt: {exc}") from exc
    return build_network(description, tensors, "network_")


def describe_network(network, where: str):
    """``(description, tensors)`` of a network: plain JSON data and CPU tensors by name.

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        The network.
    where : str
        The attribute holding it, for errors.

    Returns
    -------
    description : dict
        Kind, read-out, backbone (class name, model type, ``config.to_dict()``) and, for a
        :class:`~skbert._nn.network.TaskNetwork`, outputs and dropout.
    tensors : dict of str to torch.Tensor
        ``network.state_dict()``, copied to the CPU.
    """
    if type(network) is TaskNetwork:
        encoder = network.encoder
        head = {"n_outputs": network.output_layer.out_features, "dropout": network.dropout.p}
    elif type(network) is SentenceEncoder:
        encoder, head = network, {}
    else:
        raise TypeError(
            f"cannot save {where}: a {type(network).__qualname__}; networks are stored only "
            "as a SentenceEncoder or a TaskNetwork."
        )
    backbone = encoder.backbone
    config = json.loads(backbone.config.to_json_string(use_diff=False))
    description = {
        "format": NETWORK_FORMAT,
        "format_version": NETWORK_FORMAT_VERSION,
        "kind": type(network).__name__,
        "readout": ValueWriter((Readout,)).encode(encoder.readout, f"{where}.readout"),
        "backbone": {
            "class": type(backbone).__name__,
            "model_type": backbone.config.model_type,
            # from_config may choose another attention implementation than from_pretrained did
            # (as transformers 4.46 does): the saved one keeps the outputs bit-identical
            "attn_implementation": getattr(backbone.config, "_attn_implementation", None),
            "config": config,
        },
        **head,
    }
    return description, cpu_tensors(network)


def build_network(description, tensors, where: str):
    """Rebuild a network from :func:`describe_network`'s output, on the CPU, in eval mode.

    Raises
    ------
    ValueError
        For an unknown kind or backbone, or tensors that do not fit the network exactly.
    """
    if not isinstance(description, dict) or description.get("format") != NETWORK_FORMAT:
        raise ValueError(f"{where}: not an skbert network description")
    if description.get("format_version") != NETWORK_FORMAT_VERSION:
        raise ValueError(f"{where}: network format {description.get('format_version')!r}")
    kind = description["kind"]
    if kind not in ("SentenceEncoder", "TaskNetwork"):
        raise ValueError(f"{where}: kind={kind!r} is not SentenceEncoder or TaskNetwork")
    readout = ValueReader((Readout,)).decode(description["readout"], f"{where}.readout")
    if not isinstance(readout, Readout):
        raise ValueError(f"{where}.readout is not a Readout")
    with forked():  # new modules draw random weights: not the user's
        backbone = _build_backbone(description["backbone"], where)
        network = SentenceEncoder(backbone, readout)
        if kind == "TaskNetwork":
            n_outputs, dropout = as_int(description["n_outputs"]), description["dropout"]
            if type(dropout) not in (int, float):
                raise ValueError(f"{where}: dropout={dropout!r} is not a number")
            network = TaskNetwork(network, n_outputs=n_outputs, dropout=dropout)
    load_tensors(network, tensors, where)
    return network.eval()


#: attention implementations a saved backbone may ask for (None: transformers' default)
_ATTENTION_IMPLEMENTATIONS = (None, "eager", "sdpa")


#: configuration keys by which transformers builds a model around another one it loads
#: (a vision backbone from the hub or timm): never in a text encoder's configuration
_OTHER_MODELS = (
    "backbone",
    "backbone_config",
    "backbone_kwargs",
    "use_pretrained_backbone",
    "use_timm_backbone",
)


def _build_backbone(spec, where: str):
    """A Hugging Face encoder of the class and configuration ``spec`` names, built from its
    configuration alone (``AutoConfig.for_model``, ``AutoModel.from_config``) in float32."""
    config = dict(spec["config"])
    config.pop("auto_map", None)  # code of the checkpoint's own: never run
    model_type = spec["model_type"]
    if config.pop("model_type", model_type) != model_type:
        raise ValueError(f"{where}: the backbone's model_type and its config disagree")
    attention = spec.get("attn_implementation")
    if attention not in _ATTENTION_IMPLEMENTATIONS:
        raise ValueError(
            f"{where}: attn_implementation={attention!r} is not one of {_ATTENTION_IMPLEMENTATIONS}"
        )
    implementation = {} if attention is None else {"attn_implementation": attention}
    named = {key: config[key] for key in _OTHER_MODELS if config.get(key)}
    if named:  # a text encoder's configuration never names another model to fetch
        raise ValueError(
            f"{where}: the backbone's configuration names another model to load ({named}); "
            "an skbert save holds a text encoder whose weights are all in the folder"
        )
    try:
        with quiet_loading():
            from transformers import AutoConfig, AutoModel

            config = AutoConfig.for_model(model_type, **config)
            backbone = AutoModel.from_config(
                config, trust_remote_code=False, **implementation, **float32_weights()
            )
    except ValueError:
        raise
    except Exception as exc:  # e.g. a configuration transformers cannot build from
        raise ValueError(
            f"{where}: transformers cannot build the saved backbone ({type(exc).__name__}: {exc})"
        ) from exc
    if type(backbone).__name__ != spec["class"]:
        raise ValueError(
            f"{where}: model_type={model_type!r} builds a {type(backbone).__name__} here, but "
            f"the saved backbone is a {spec['class']!r} (another transformers version?)"
        )
    return backbone


def cpu_tensors(module) -> dict:
    """``module.state_dict()`` as separate contiguous CPU copies (safetensors refuses tensors
    that share memory)."""
    return {
        name: tensor.detach().to("cpu", copy=True).contiguous()
        for name, tensor in module.state_dict().items()
    }


def load_tensors(module, tensors, where: str) -> None:
    """Load ``tensors`` into ``module`` exactly (strict), or a ``ValueError`` naming ``where``."""
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"{where}: the stored tensors do not fit the network: {exc}") from exc


def linear_to_state(layer) -> dict:
    """A ``torch.nn.Linear`` (an estimator's ``output_layer_``) as plain data, for a pickle:
    its shape and mode, and its tensors as safetensors bytes (as :func:`network_to_state`)."""
    from safetensors.torch import save as safetensors_bytes

    return {
        "format": LINEAR_FORMAT,
        "in_features": layer.in_features,
        "out_features": layer.out_features,
        "bias": layer.bias is not None,
        "training": layer.training,
        "tensors": safetensors_bytes(cpu_tensors(layer)),
    }


def linear_from_state(state: dict, where: str):
    """The ``torch.nn.Linear`` that :func:`linear_to_state` described, rebuilt on the CPU.

    Raises
    ------
    ValueError
        For a state that is not a layer's, naming ``where``.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load as tensors_from_bytes

    try:
        tensors = tensors_from_bytes(bytes(state["tensors"]))
        shape = (as_int(state["in_features"]), as_int(state["out_features"]))
    except (SafetensorError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where} is corrupt: {exc}") from exc
    with forked():  # a new layer draws its initial weights: not from the caller's generator
        layer = torch.nn.Linear(*shape, bias=state.get("bias") is True)
    load_tensors(layer, tensors, where)
    return layer.train(state.get("training") is True)
