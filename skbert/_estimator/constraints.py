"""Parameter constraints of scikit-learn's validation, with a bool refused where a number is
meant.

scikit-learn's :class:`~sklearn.utils._param_validation.Interval` counts ``True`` as the int 1
(a bool is an :class:`~numbers.Integral`), so ``batch_size=True`` trained one text a batch and
``learning_rate=True`` at 1.0, without a word. :class:`Number` is the same interval that a bool
(Python's or numpy's) does not satisfy; :data:`RANDOM_STATE` is scikit-learn's
``"random_state"`` constraint so built. Used by the estimators' ``_parameter_constraints`` and
the functions of :mod:`skbert.pretraining`.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils._param_validation import Integral, Interval

__all__ = ["RANDOM_STATE", "Number"]


class Number(Interval):
    """An :class:`~sklearn.utils._param_validation.Interval` of numbers, bools left out."""

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)

    def __str__(self):
        return f"{super().__str__()} (not a bool)"


#: ``random_state``: an int seed (not a bool), a RandomState or None
RANDOM_STATE = [Number(Integral, 0, 2**32 - 1, closed="both"), np.random.RandomState, None]
