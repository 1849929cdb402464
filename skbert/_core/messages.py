"""What a run tells the user: progress bars and messages on stderr, from rank 0 only.

Used by the estimators, :mod:`skbert.pretraining`, the training loop and the prediction path.
In a ``torchrun`` launch (:mod:`skbert._core.launch`) the other ranks stay silent.
"""

from __future__ import annotations

import sys

from .launch import current_share

__all__ = ["progress", "report", "user_stacklevel"]


def progress(iterable, *, desc: str, unit: str, verbose, total=None):
    """``iterable`` behind a tqdm progress bar on stderr when ``verbose``, else as it is.

    ``tqdm.auto`` gives a widget in Jupyter (with the ``notebook`` extra) and a text bar
    elsewhere; it is imported on first use.
    """
    if not verbose or not current_share().writer:  # in a torchrun launch, rank 0 shows it
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, unit=unit, total=total, file=sys.stderr)


#: the packages whose frames lie between the user's call and the warning: skbert's own, and
#: scikit-learn's and joblib's when a Pipeline, GridSearchCV or joblib.Memory calls skbert
_LIBRARY_FRAMES = ("skbert", "sklearn", "joblib")


def user_stacklevel() -> int:
    """The ``stacklevel`` for :func:`warnings.warn`, called by this function's caller, that
    names the first frame outside skbert, scikit-learn and joblib (the user's call of
    ``transform``, ``predict``, ``GridSearchCV.fit``, ..., however deep in skbert the warning
    is made); the outermost frame where there is none (a joblib worker's task)."""
    frame, level = sys._getframe(1), 1
    while frame.f_globals.get("__name__", "").split(".")[0] in _LIBRARY_FRAMES:
        if frame.f_back is None:
            break
        frame, level = frame.f_back, level + 1
    return level


def report(message: str) -> None:
    """Tell the user ``message``: on stderr, the stream of the progress bars, without
    breaking a bar that is being drawn (torch imports tqdm anyway, so this costs nothing).
    In a torchrun launch, rank 0 alone reports."""
    if not current_share().writer:
        return
    from tqdm import tqdm

    tqdm.write(message, file=sys.stderr)
