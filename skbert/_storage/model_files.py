"""Where a model's files are: a local folder, the Hugging Face hub, or the hub's cache.

:mod:`skbert._nn.backbone` loads models with them and says what to do when one is found
nowhere: whether a name can only be a path, what a folder lacks of a model folder, whether an
error means that the hub cannot be reached, and where a hub id loads from when it cannot.
huggingface_hub is imported inside the functions that use it.
"""

from __future__ import annotations

import os

__all__ = [
    "OFFLINE_ADVICE",
    "offline_advice",
    "is_local_path",
    "what_folder_lacks",
    "is_connection_error",
    "ask_hub",
    "hub_source",
]

#: what to do offline, for the errors of a hub that cannot be reached
OFFLINE_ADVICE = (
    "Without network access, set HF_HUB_OFFLINE=1: the Hugging Face cache is then read "
    "without trying the network, and nothing waits on its retries."
)


def offline_advice() -> str:
    """:data:`OFFLINE_ADVICE`, or nothing where ``HF_HUB_OFFLINE`` is already in force (as
    huggingface_hub read it)."""
    from huggingface_hub import constants

    return "" if constants.HF_HUB_OFFLINE else OFFLINE_ADVICE


_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model")


def is_local_path(model: str) -> bool:
    """Whether ``model`` can only be a local path, never a hub id (``name`` or ``org/name``).

    A hub id starts with a letter or digit and has at most one ``/``; so ``./x``, ``~/x``,
    ``/x`` and ``a/b/c`` (and ``a\\b`` on Windows) are paths.
    """
    return (
        model.startswith((".", "~", os.path.sep, *filter(None, [os.path.altsep])))
        or os.path.isabs(model)
        or (os.path.sep != "/" and os.path.sep in model)
        or model.count("/") > 1
    )


def what_folder_lacks(folder: str) -> str:
    """What ``folder`` lacks of a model folder (config.json, weights, tokenizer files), with
    what it holds instead; '' when it lacks none of them (or cannot be listed)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return ""
    lacks = []
    if "config.json" not in names:
        lacks.append("no config.json")
    if not any(n.endswith((".safetensors", ".bin", ".safetensors.index.json")) for n in names):
        lacks.append(f"no weights ({' or '.join(_WEIGHTS)})")
    if not any(n in _TOKENIZER or n.endswith(".model") for n in names):
        lacks.append(f"no tokenizer files ({', '.join(_TOKENIZER[:3])}, ...)")
    if not lacks:
        return ""
    held = (", ".join(names[:6]) + (", ..." if len(names) > 6 else "")) if names else "nothing"
    inner = [n for n in names if os.path.isfile(os.path.join(folder, n, "config.json"))]
    # e.g. a sentence-transformers folder, whose encoder may sit in a subfolder
    found = f"; its subfolder {inner[0]!r} holds a config.json: is that the model?" if inner else ""
    return f"it has {', '.join(lacks)} (it holds {held}){found}"


def is_connection_error(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error it came from, says that the hub could not be reached.

    Compared by class name: huggingface_hub raises requests', httpx's or httpx2's errors,
    depending on its version.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & {"ConnectError", "ConnectionError", "ConnectTimeout"}:  # not a slow read
            return True
        if "couldn't connect to" in str(exc):  # transformers' words for it
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def ask_hub(repo_id: str) -> None:
    """One request to the hub about ``repo_id``, without retries; raises what fails."""
    from huggingface_hub import HfApi, constants

    HfApi().repo_info(repo_id, timeout=constants.DEFAULT_ETAG_TIMEOUT)


def hub_source(repo_id: str):
    """Where the hub id ``repo_id`` loads from, asking the hub once.

    transformers resolves an id file by file (and a tokenizer's config twice), each through 5
    retries when the hub cannot be reached: 46 s before the error offline. So the hub is
    asked once first; when it answers (or ``HF_HUB_OFFLINE=1`` says not to ask it), the id is
    returned for transformers to resolve as usual; when it cannot be reached, the id's folder
    in the Hugging Face cache, which holds the files transformers would have read after its
    retries.

    Parameters
    ----------
    repo_id : str
        A hub id.

    Returns
    -------
    source : str or None
        ``repo_id``, or the folder of its cached snapshot; None when neither can serve.
    unreachable : Exception or None
        The error that says the hub cannot be reached, when ``repo_id`` is not in the cache
        either (``source`` is then None).
    """
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE:
        return repo_id, None
    try:
        ask_hub(repo_id)
    except Exception as exc:  # noqa: BLE001 - the hub's own answers are for transformers to report
        if not is_connection_error(exc):
            return repo_id, None
        try:
            config = try_to_load_from_cache(repo_id, "config.json")
        except Exception:  # noqa: BLE001 - not a valid hub id, so not in the cache
            config = None
        if isinstance(config, str):
            return os.path.dirname(config), None
        return None, exc
    return repo_id, None
