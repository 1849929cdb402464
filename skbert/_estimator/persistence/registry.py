"""The estimator classes that a save may name: a registry the classes join when defined.

:class:`~skbert._estimator.base.BertEstimatorBase` registers every public subclass when its
``class`` statement runs (``__init_subclass__`` calls :func:`register_estimator`), so that
``BertSentenceTransformer``, ``BertTextClassifier`` and a user's own subclass can be saved and
loaded without this module importing any of them. :func:`skbert.load` builds only a class
found here under the name its folder gives: never an import of a name read from a file.
``import skbert`` defines (and so registers) skbert's estimators.
"""

from __future__ import annotations

import inspect

__all__ = [
    "UnknownEstimatorClass",
    "register_estimator",
    "estimator_class",
    "estimator_name",
    "registered_names",
]


class UnknownEstimatorClass(ValueError):
    """A save names a class that is not registered in this process."""


#: the registered classes by name (a class's ``__name__`` is what a save records)
_CLASSES: dict = {}


def register_estimator(cls):
    """Register ``cls`` under its name, so that saves of it load; returns ``cls``.

    Private names (a leading ``_``) and abstract classes are not registered. A class of the
    same module and qualified name replaces the one registered (a class statement run again,
    as in a notebook); another class of a registered name is left out (its estimators cannot
    be saved), so that no subclass takes over the loading of skbert's own saves.
    """
    name = cls.__name__
    if name.startswith("_") or inspect.isabstract(cls):
        return cls
    known = _CLASSES.get(name)
    if known is None or (known.__module__, known.__qualname__) == (
        cls.__module__,
        cls.__qualname__,
    ):
        _CLASSES[name] = cls
    return cls


def registered_names() -> tuple:
    """The names of the registered estimator classes, sorted."""
    return tuple(sorted(_CLASSES))


def estimator_class(name):
    """The registered estimator class called ``name``.

    Raises
    ------
    ValueError
        If no class of that name is registered (or ``name`` is not a str).
    """
    if not isinstance(name, str) or name not in _CLASSES:
        raise UnknownEstimatorClass(
            f"class={name!r} is not an estimator skbert loads in this process; allowed: "
            f"{', '.join(registered_names())}. A subclass of skbert's estimators is known once "
            "its class statement has run: import the module that defines it before loading."
        )
    return _CLASSES[name]


def estimator_name(estimator, where: str) -> str:
    """The name under which ``estimator``'s class is registered.

    Raises
    ------
    TypeError
        If its class is not the one registered under its name; ``where`` names it.
    """
    cls = type(estimator)
    if _CLASSES.get(cls.__name__) is not cls:
        raise TypeError(
            f"cannot save {where}: a {cls.__module__}.{cls.__qualname__}; only the registered "
            f"skbert estimators can be saved ({', '.join(registered_names())}: the public "
            "subclasses of BertEstimatorBase, registered when they are defined, whose name no "
            "other class had taken)."
        )
    return cls.__name__
