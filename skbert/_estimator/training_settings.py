"""The training parameters of one fit, resolved once at its start into a frozen record.

As :mod:`skbert._estimator.readout` resolves the read-out parameters,
:func:`resolve_training_settings` resolves the training ones from an estimator's
``get_params(deep=False)``: the old spellings read (:mod:`skbert._core.deprecations`:
``fine_tune="head"`` as ``"top"``, a given ``head_learning_rate`` as ``top_learning_rate``), and
what follows from them (whether the fit trains at all, whether the encoder trains). ``fit`` of
:class:`~skbert.BertTextClassifier` and :class:`~skbert.BertSentenceTransformer` resolves them
first and hands the :class:`TrainingSettings` to everything that reads them, down to the
training loop's :class:`~skbert._training.loop.TrainingConfig`
(:meth:`TrainingSettings.loop_config`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._core.deprecations import NOT_GIVEN, read_fine_tune, read_top_learning_rate
from .._training.loop import TrainingConfig

__all__ = ["TrainingSettings", "resolve_training_settings"]


@dataclass(frozen=True)
class TrainingSettings:
    """The training parameters of a fit, old spellings read.

    Attributes
    ----------
    fine_tune : {"none", "top", "full"}
        What the fit trains (``"head"`` read as ``"top"``).
    learning_rate, layer_lr_decay, weight_decay, warmup_fraction : float
        As the parameters of those names.
    top_learning_rate : float or None
        ``top_learning_rate``, or the deprecated ``head_learning_rate`` when it is given.
    max_epochs, batch_size : int
        As the parameters of those names.
    """

    fine_tune: str
    learning_rate: float
    layer_lr_decay: float
    top_learning_rate: float | None
    weight_decay: float
    warmup_fraction: float
    max_epochs: int
    batch_size: int

    @property
    def trains(self) -> bool:
        """Whether the fit trains anything (not ``fine_tune="none"``)."""
        return self.fine_tune != "none"

    @property
    def train_backbone(self) -> bool:
        """Whether the encoder trains (``fine_tune="full"``), not only the layers on top."""
        return self.fine_tune == "full"

    def loop_config(self, device, dtype, verbose, **changes) -> TrainingConfig:
        """The training loop's :class:`~skbert._training.loop.TrainingConfig` of these
        settings on ``device`` in ``dtype``, with ``changes`` to its fields."""
        values = {
            "max_epochs": self.max_epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "layer_lr_decay": self.layer_lr_decay,
            "top_learning_rate": self.top_learning_rate,
            "weight_decay": self.weight_decay,
            "warmup_fraction": self.warmup_fraction,
            "train_backbone": self.train_backbone,
            "verbose": verbose,
            "device": device,
            "dtype": dtype,
        }
        return TrainingConfig(**{**values, **changes})


def resolve_training_settings(params: dict) -> TrainingSettings:
    """The :class:`TrainingSettings` of an estimator's parameters.

    Parameters
    ----------
    params : dict
        ``estimator.get_params(deep=False)``, validated.

    Returns
    -------
    TrainingSettings
    """
    return TrainingSettings(
        fine_tune=read_fine_tune(params["fine_tune"]),
        learning_rate=params["learning_rate"],
        layer_lr_decay=params["layer_lr_decay"],
        top_learning_rate=read_top_learning_rate(
            params["top_learning_rate"], params.get("head_learning_rate", NOT_GIVEN)
        ),
        weight_decay=params["weight_decay"],
        warmup_fraction=params["warmup_fraction"],
        max_epochs=params["max_epochs"],
        batch_size=params["batch_size"],
    )
