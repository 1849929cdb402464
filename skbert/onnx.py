"""ONNX export of a fitted estimator: :func:`export_onnx`.

The graph runs the fitted network from padded token ids to the estimator's output (sentence
vectors, class probabilities and logits, or regression values in the units of ``y``), with
dynamic batch and sequence axes; the tokenizer is saved beside it, and a small JSON file says
what the graph expects and returns. The export traces a
:class:`~skbert._nn.deployed.DeployedNetwork` with ``torch.onnx.export`` and its default
exporter, the ``torch.export`` (dynamo) one, which needs ``onnx`` and ``onnxscript``: the
optional extra ``onnx`` (``pip install "skbert[onnx]"``, which brings ``onnxruntime`` too to
run the graph). ``import skbert`` imports none of them; this module is imported on the first
use of ``skbert.export_onnx``.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import logging
import os
import warnings
from numbers import Integral

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from ._core.messages import user_stacklevel
from ._core.version import __version__
from ._nn.deployed import DeployedNetwork
from ._storage.files import atomic_write, check_output_dir
from ._text.encoding import pad_batch
from .classifier import BertTextClassifier
from .regressor import BertTextRegressor
from .sentence import BertSentenceTransformer

__all__ = ["MIN_OPSET", "METADATA_FILE", "MODEL_FILE", "export_onnx"]

#: The ONNX graph's file name in an export folder (the tokenizer's files are beside it).
MODEL_FILE = "model.onnx"
#: The file name of the JSON that says what the graph expects and returns.
METADATA_FILE = "skbert-onnx.json"

#: The oldest ONNX opset the ``torch.export`` exporter writes.
MIN_OPSET = 18

#: The window poolings that averaging or pooling the per-window outputs reproduces: for a
#: sentence transformer any weight-free one; behind an output layer (linear, like the
#: regressor's affine map) only the mean, as the mean of the outputs is the output of the mean.
_WINDOW_POOLINGS = {"BertSentenceTransformer": ("mean", "max"), "task": ("mean",)}

#: Graphs larger than this keep their weights in a file of their own (``model.onnx.data``):
#: a protobuf file holds 2 GiB at most.
_EXTERNAL_DATA_BYTES = 1 << 30


def export_onnx(estimator, path, *, opset=None):
    """Export a fitted estimator to an ONNX graph, with its tokenizer, in the folder ``path``.

    The graph takes ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` where the
    model reads them), int64 of shape ``(batch, sequence)``, both axes dynamic, as the saved
    tokenizer returns them (``tokenizer(texts, truncation=True, padding=True,
    return_tensors="np")``), and returns, one row per input:

    - :class:`~skbert.BertSentenceTransformer`: ``embeddings``, what ``transform`` gives
      (after pooling, the layer combination and, when ``normalize_``, the unit L2 norm);
    - :class:`~skbert.BertTextClassifier`: ``probabilities`` (``predict_proba``, columns in
      the order of ``classes_``) and ``logits`` (``decision_function``, which for two classes
      is ``logits[:, 1] - logits[:, 0]``); the predicted class is ``classes_`` of the largest
      probability (for multi-label, each label whose logit is above 0, as ``predict`` reads
      it: a probability that rounds to 0.5 in float32 can hide a logit just above 0); both
      float32;
    - :class:`~skbert.BertTextRegressor`: ``predictions``, float64 in the units of ``y`` (the
      standardisation of the targets is folded into the graph, in float64 as ``predict``
      applies it), of shape ``(batch, n_outputs_)``: column 0 is ``predict`` for a 1-D ``y``.

    With ``truncation="chunks"`` a text is several model inputs, one per window, and the graph
    is the per-window network: ``window_embeddings`` (unnormalised), ``window_logits`` or
    ``window_predictions``; pooling each text's windows as ``chunk_pooling`` says (and then
    normalising the vectors, or soft-maxing the logits) gives the estimator's output (see the
    user guide's "Deploying: ONNX export"). Exact for a sentence transformer with
    ``chunk_pooling="mean"`` or ``"max"``, and for a classifier or regressor with ``"mean"``
    (the mean of the output layer's values is its value of the mean); other window poolings
    raise.

    The network is float32 whatever ``precision``: it matches the estimator's outputs with
    ``precision="fp32"`` within float32 rounding (1e-4 in skbert's tests; a regressor's
    within 1e-4 of ``target_scale_``, the spread of y), not bit for bit.

    Parameters
    ----------
    estimator : BertSentenceTransformer, BertTextClassifier or BertTextRegressor
        A fitted estimator (a transformer with ``fine_tune="none"``, never trained, too).
    path : str or os.PathLike
        The folder to write: a new path, an empty folder or a previous export (whose files
        are replaced, a ``model.onnx.data`` the new graph does not use removed). It gets
        ``model.onnx`` (and ``model.onnx.data``
        for a graph over 1 GiB), the tokenizer's files, and ``skbert-onnx.json``, which
        records the input and output names and their meaning, ``max_length``, the truncation
        settings, the special tokens, ``classes_`` and the skbert version.
    opset : int or None, default=None
        The ONNX opset to write, at least 18 (the oldest the exporter writes); None takes
        torch's default.

    Returns
    -------
    str
        The folder written.

    Raises
    ------
    NotFittedError
        If ``estimator`` is not fitted.
    TypeError
        If ``estimator`` is not one of skbert's estimators.
    ValueError
        For an ``opset`` below 18 or above the newest the installed onnx knows, or a
        ``chunk_pooling`` whose per-window outputs cannot be pooled into the estimator's
        (named in the message).
    FileExistsError
        If ``path`` is a folder with files in it that is not a previous export.
    ImportError
        If ``onnx`` or ``onnxscript`` is missing (``pip install "skbert[onnx]"``).

    Examples
    --------
    A sentence transformer that trains nothing (``fine_tune="none"``, the default), exported,
    then run with onnxruntime and the saved tokenizer alone, as where it is deployed:

    >>> import json
    >>> import numpy as np
    >>> import onnxruntime  # doctest: +SKIP
    >>> from transformers import AutoTokenizer
    >>> import skbert
    >>> from skbert import BertSentenceTransformer
    >>> texts = ["a gripping, beautiful film", "dull and far too long"]
    >>> est = BertSentenceTransformer(precision="fp32").fit(texts)  # doctest: +SKIP
    >>> skbert.export_onnx(est, "exported-minilm")  # doctest: +SKIP
    'exported-minilm'
    >>> with open("exported-minilm/skbert-onnx.json", encoding="utf-8") as f:  # doctest: +SKIP
    ...     info = json.load(f)
    >>> tokenizer = AutoTokenizer.from_pretrained("exported-minilm")  # doctest: +SKIP
    >>> session = onnxruntime.InferenceSession("exported-minilm/model.onnx")  # doctest: +SKIP
    >>> encoded = tokenizer(texts, **info["tokenizer_call"])  # doctest: +SKIP
    >>> inputs = {name: encoded[name] for name in info["inputs"]}  # doctest: +SKIP
    >>> (vectors,) = session.run(["embeddings"], inputs)  # doctest: +SKIP
    >>> np.allclose(vectors, est.transform(texts), atol=1e-4)  # doctest: +SKIP
    True
    """
    kinds = (BertSentenceTransformer, BertTextClassifier, BertTextRegressor)
    if not isinstance(estimator, kinds):
        got = (
            f"the class {estimator.__name__} itself: pass a fitted instance"
            if isinstance(estimator, type)
            else f"estimator={type(estimator).__name__}"
        )
        raise TypeError(
            "export_onnx exports a BertSentenceTransformer, BertTextClassifier or "
            f"BertTextRegressor; got {got}."
        )
    if opset is not None and (
        not isinstance(opset, Integral) or isinstance(opset, bool) or opset < MIN_OPSET
    ):
        raise ValueError(
            f"opset={opset!r} is not allowed: use an int >= {MIN_OPSET} (the oldest opset "
            "torch's ONNX exporter writes), or None for torch's default."
        )
    check_is_fitted(estimator)
    opset = None if opset is None else int(opset)  # a numpy int too, written to the JSON
    if "dynamo" not in inspect.signature(torch.onnx.export).parameters:
        raise RuntimeError(
            f"export_onnx needs torch's torch.export-based ONNX exporter "
            f"(torch.onnx.export(dynamo=True)), which torch {torch.__version__} lacks; it "
            "is tested with torch 2.13."
        )
    _require("onnx")
    _require("onnxscript")
    _check_newest_opset(opset)
    folder = check_output_dir(path, "path")
    _check_replaceable(folder)
    plan = _plan(estimator)
    # a float32 copy on the CPU: exporting leaves the fitted network as it is
    network = copy.deepcopy(estimator.fitted_network()).to("cpu", torch.float32).eval()
    deployed = DeployedNetwork(network, plan["finish"], **plan.get("affine", {})).eval()
    program = _trace(deployed, _example_batch(estimator), plan["outputs"], opset)
    inputs = [value.name for value in program.model.graph.inputs]
    written = program.model.opset_imports.get("", None)
    if opset is not None and written != opset:  # the exporter fell back to another opset
        raise ValueError(
            f"opset={opset!r} is not one torch {torch.__version__}'s ONNX exporter writes "
            f"(it fell back to opset {written}, with operators of {opset} that no runtime "
            f"loads); use an opset from {MIN_OPSET} to the newest it knows, or None."
        )
    # all that can fail before anything is written: a failed export leaves no files
    metadata = _metadata(estimator, plan, inputs, written)
    # ASCII (labels escaped): read alike whatever encoding open() defaults to (cp1252 read
    # UTF-8 labels as mojibake)
    text = json.dumps(metadata, indent=2) + "\n"
    os.makedirs(folder, exist_ok=True)
    size = sum(p.numel() * p.element_size() for p in deployed.parameters())
    external = size > _EXTERNAL_DATA_BYTES
    if not external:  # a previous export's weights file beside a graph that holds its own
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, MODEL_FILE + ".data"))
    program.save(os.path.join(folder, MODEL_FILE), external_data=external)
    _save_tokenizer(estimator, folder)
    atomic_write(os.path.join(folder, METADATA_FILE), lambda h: h.write(text.encode("utf-8")))
    return folder


def _check_newest_opset(opset) -> None:
    """Refuse an opset newer than the installed onnx knows before the trace, the slow part
    (the exporter would trace, then fall back to another opset)."""
    import onnx

    newest = onnx.defs.onnx_opset_version()
    if opset is not None and opset > newest:
        raise ValueError(
            f"opset={opset!r} is not allowed: the installed onnx {onnx.__version__} knows "
            f"opsets up to {newest}; use an int from {MIN_OPSET} to {newest}, or None."
        )


def _check_replaceable(folder: str) -> None:
    """Refuse to write into a folder that holds other files than a previous export's (a
    model's checkpoint folder: the export's tokenizer files would replace its own)."""
    if not os.path.isdir(folder) or not os.listdir(folder):
        return
    if not os.path.isfile(os.path.join(folder, METADATA_FILE)):
        raise FileExistsError(
            f"path={folder!r} is a folder with files in it that is not an export of "
            f"export_onnx (it has no {METADATA_FILE}); its tokenizer and model files would be "
            "overwritten: give a new path, an empty folder or a previous export."
        )


def _require(name: str) -> None:
    import importlib.util

    if importlib.util.find_spec(name) is None:
        raise ImportError(
            f"export_onnx needs the package {name!r}, which is not installed: "
            'pip install "skbert[onnx]" (onnx, onnxscript and onnxruntime).'
        )


def _plan(estimator) -> dict:
    """What the graph computes after the network, its output names and their meaning."""
    readout = estimator.readout_
    per_window = readout.chunked
    kind = type(estimator).__name__
    if per_window:
        sentence = isinstance(estimator, BertSentenceTransformer)  # subclasses too
        allowed = _WINDOW_POOLINGS["BertSentenceTransformer" if sentence else "task"]
        if readout.chunk_pooling not in allowed:
            raise ValueError(
                f"chunk_pooling={readout.chunk_pooling!r} with truncation='chunks' cannot be "
                f"exported: the graph is the per-window network, and pooling its outputs "
                f"reproduces {kind}'s only for chunk_pooling in {allowed}. Export an "
                f"estimator fitted with one of those, or with truncation='head', 'tail' or "
                "'head+tail'."
            )
    window = "window_" if per_window else ""
    pooled = (
        f" of one window of a text; pool a text's windows by chunk_pooling="
        f"{readout.chunk_pooling!r}"
        if per_window
        else ""
    )
    if isinstance(estimator, BertSentenceTransformer):
        finish = "l2" if estimator.normalize_ and not per_window else "none"
        meaning = "the sentence vector (transform)"
        if per_window:
            then = ", then scale to unit L2 norm" if estimator.normalize_ else ""
            meaning = f"the unnormalised vector{pooled}{then}: transform"
        return {"finish": finish, "outputs": {f"{window}embeddings": meaning}}
    if isinstance(estimator, BertTextClassifier):
        squash = "sigmoid" if estimator.multilabel_ else "softmax"
        logits = (
            "logits (decision_function, one column per label)"
            if estimator.multilabel_
            else "logits (decision_function; for two classes it is logits[:, 1] - logits[:, 0])"
        )
        if per_window:
            return {
                "finish": "none",
                "outputs": {"window_logits": f"the {logits}{pooled}, then take the {squash}"},
            }
        return {
            "finish": squash,
            "outputs": {
                "probabilities": f"predict_proba ({squash} of the logits), columns as classes",
                "logits": f"the {logits}",
            },
        }
    affine = {"scale": estimator.target_scale_, "shift": estimator.target_mean_}
    meaning = "predict, in the units of y, float64, one column per output (column 0 for a 1-D y)"
    if per_window:
        meaning = f"the prediction{pooled}: {meaning}"
    return {"finish": "affine", "affine": affine, "outputs": {f"{window}predictions": meaning}}


def _example_batch(estimator) -> tuple:
    """Two padded rows of different lengths (the tracing example), as the estimator encodes
    them: batch and sequence sizes of 2 or more, which ``torch.export`` keeps dynamic."""
    texts = ["an example", "an example for the export , somewhat longer than the first one"]
    pairs = getattr(estimator, "pairs_", False)
    encoded = estimator._encode(texts, texts[::-1] if pairs else None)
    pad_id = estimator.tokenizer_.pad_token_id or 0
    ids, mask, types, _ = pad_batch(encoded, range(len(encoded)), pad_id)
    return tuple(torch.from_numpy(a) for a in (ids, mask, types))


def _trace(deployed, example, outputs, opset):
    """``torch.onnx.export`` of ``deployed`` with dynamic batch and sequence axes."""
    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence")
    axes = {0: batch, 1: sequence}
    names = ["input_ids", "attention_mask"]
    args = example[:2]
    if deployed.uses_token_types:
        names.append("token_type_ids")
        args = example
    # the exporter logs a line for each torchvision operator it cannot register,
    # onnxscript's version converter a traceback for an opset it cannot convert to
    # (which the fallback check after the trace reports as an error of its own), and its
    # optimiser each operator with several outputs that it leaves unfolded (DeBERTa's
    # LayerNormalization: the graph computes it, as it should)
    loggers = [
        logging.getLogger("torch.onnx._internal.exporter._registration"),
        logging.getLogger("onnxscript.version_converter"),
        logging.getLogger("onnxscript.optimizer._constant_folding"),
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        return _export(deployed, args, names, axes, outputs, opset)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _export(deployed, args, names, axes, outputs, opset):
    with warnings.catch_warnings():
        # torch's notes on its own internals (axis names shared by inputs, pytree specs)
        warnings.filterwarnings("ignore", message=r".*axis name", category=UserWarning)
        warnings.filterwarnings("ignore", message=r".*LeafSpec", category=FutureWarning)
        return torch.onnx.export(
            deployed,
            args,
            dynamo=True,
            opset_version=opset,
            dynamic_shapes={name: axes for name in names},
            output_names=list(outputs),
            verbose=False,
        )


def _save_tokenizer(estimator, folder) -> None:
    """The estimator's tokenizer, set to cut texts as the estimator does where it can: to
    ``max_length_`` tokens, at the end (``"head"``, ``"head+tail"``'s head only) or at the
    start (``"tail"``), padding on the right with the id skbert pads with.

    ``tokenizer.json`` says the same for the ``tokenizers`` package alone (its truncation and
    padding; transformers sets its own on every call): without them a text past the model's
    positions failed in onnxruntime, and one past ``max_length_`` gave another vector. A
    tokenizer without a pad token (skbert pads with id 0) gets id 0's token as its pad token
    where that is a special token (the attention mask hides it, and the documented call pads:
    it refused every batch); an ordinary token at id 0 cannot be made one (a special token is
    split out of texts: byte-level BPE's "!!" became "!", "!"), so that tokenizer is saved
    without padding, with a warning."""
    tokenizer = copy.deepcopy(estimator.tokenizer_)
    side = "left" if estimator.readout_.truncation == "tail" else "right"
    tokenizer.model_max_length = estimator.max_length_
    tokenizer.truncation_side = side
    tokenizer.init_kwargs["truncation_side"] = side  # what save_pretrained writes
    # skbert pads on the right (a left-padding checkpoint's batches moved [CLS] and positions)
    tokenizer.padding_side = "right"
    tokenizer.init_kwargs["padding_side"] = "right"
    if tokenizer.pad_token_id is None:
        added = tokenizer.added_tokens_decoder.get(0)
        if (added is not None and added.special) or 0 in tokenizer.all_special_ids:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(0)
        else:
            warnings.warn(
                "The tokenizer has no pad token, and id 0 "
                f"({tokenizer.convert_ids_to_tokens(0)!r}) is an ordinary token: the saved "
                "tokenizer pads no batch (tokenizer_call's padding=True refuses). Encode one "
                "text at a time, or pad the ids with 0 and the attention mask with 0, as skbert "
                "does.",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.enable_truncation(estimator.max_length_, strategy="longest_first", direction=side)
    if backend is not None and tokenizer.pad_token_id is not None:
        backend.enable_padding(
            direction="right", pad_id=tokenizer.pad_token_id, pad_token=tokenizer.pad_token,
            pad_type_id=tokenizer.pad_token_type_id,
        )  # fmt: skip
    tokenizer.save_pretrained(folder)


def _metadata(estimator, plan, inputs, opset) -> dict:
    readout = estimator.readout_
    specials = estimator.special_tokens_
    call = {"truncation": True, "padding": True, "return_tensors": "np"}
    if "token_type_ids" in inputs:
        call["return_token_type_ids"] = True
    if readout.chunked:
        call["return_overflowing_tokens"] = True
    metadata = {
        "format": "skbert-onnx",
        "format_version": 1,
        "skbert_version": __version__,
        "estimator": type(estimator).__name__,
        "model_file": MODEL_FILE,
        "opset": opset,
        "inputs": inputs,
        "outputs": plan["outputs"],
        "max_length": int(readout.max_length),
        "truncation": readout.truncation,
        "head_length": int(readout.head_length) if readout.truncation == "head+tail" else None,
        "per_window": readout.chunked,
        "chunk_pooling": readout.chunk_pooling if readout.chunked else None,
        "max_chunks": int(readout.max_chunks) if readout.chunked and readout.max_chunks else None,
        "tokenizer_call": call,
        # the saved tokenizer cuts texts as skbert does, except "head+tail" (its head only);
        # pairs longer than max_length too (a fast tokenizer's "longest_first" splits them as
        # skbert.truncation.truncate_pair does), except "head+tail"
        "tokenizer_cuts_as_skbert": {
            "texts": readout.truncation != "head+tail",
            "pairs_within_max_length": not readout.chunked,
            "longer_pairs": not readout.chunked and readout.truncation != "head+tail",
        },
        "special_tokens": {
            "single": [list(part) for part in specials.single],
            "pair": [list(part) for part in specials.pair],
        },
        # the token type of each part: (before, text, after); (before, first, between,
        # second, after)
        "special_token_types": {
            "single": [int(t) for t in specials.single_types],
            "pair": [int(t) for t in specials.pair_types],
        },
    }
    if isinstance(estimator, BertSentenceTransformer):
        metadata["normalize"] = bool(estimator.normalize_)
    if isinstance(estimator, BertTextClassifier):
        metadata["classes"] = np.asarray(estimator.classes_).tolist()
        metadata["multilabel"] = bool(estimator.multilabel_)
    if isinstance(estimator, BertTextRegressor):
        metadata["n_outputs"] = int(estimator.n_outputs_)
        metadata["multioutput"] = bool(estimator.multioutput_)
    if hasattr(estimator, "pairs_"):
        metadata["pairs"] = bool(estimator.pairs_)
    return metadata
