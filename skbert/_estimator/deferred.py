"""The encoder that a fit left unloaded: ``BertSentenceTransformer(memory=...)``.

With a feature cache, ``fine_tune="none"`` and a model in a local folder, ``fit`` reads the
model's tokenizer and configuration only (enough for the read-out) and hashes its files: a
grid search over poolings and layers whose texts are all cached never loads the weights.
The :class:`DeferredNetwork` it leaves in ``deferred_network_`` says what to load, and
:meth:`~skbert._estimator.base.BertEstimatorBase.fitted_network` loads it on first need,
into the estimator's prediction cache (:mod:`skbert._estimator.prediction_cache`), never
into the estimator. Persistence stores it as plain data (a pickle, a ``save``).
"""

from __future__ import annotations

import dataclasses

from .._nn.backbone import load_backbone
from .._nn.network import SentenceEncoder
from .._nn.readout import Readout
from .._storage.fingerprint import directory_fingerprint
from .readout import warn_untrained_pooler

__all__ = ["DeferredNetwork"]


@dataclasses.dataclass(frozen=True)
class DeferredNetwork:
    """A fitted encoder not loaded yet: where it is, the hash of its files, its read-out.

    Parameters
    ----------
    folder : str
        Absolute path of the model folder.
    fingerprint : str
        Hash of the folder's files when ``fit`` read it
        (:func:`~skbert._storage.fingerprint.directory_fingerprint`); the model part of the
        feature cache's key (``feature_fingerprint_``).
    readout : Readout
        The read-out that the network is built with.
    """

    folder: str
    fingerprint: str
    readout: Readout

    def load(self) -> SentenceEncoder:
        """Load the encoder and build the network, in eval mode.

        The folder is hashed again before and after loading: had it changed since ``fit``,
        the new vectors would be stored under the old model's cache key and mixed with its
        vectors in one output, so that raises instead.

        Returns
        -------
        SentenceEncoder
            The network ``fit`` would have built.

        Raises
        ------
        RuntimeError
            If the folder's files changed after ``fit``.
        FileNotFoundError
            If the folder is gone.
        """
        self._check_unchanged()
        _, backbone = load_backbone(self.folder)
        self._check_unchanged()
        warn_untrained_pooler(self.folder, backbone, self.readout.pooling)
        return SentenceEncoder(backbone, self.readout).eval()

    def _check_unchanged(self) -> None:
        try:
            now = directory_fingerprint(self.folder, fresh=True)
        except OSError as error:  # moved or deleted: say why the folder is needed now
            raise FileNotFoundError(
                f"The model folder {self.folder!r} that fit read is gone ({error}); fit "
                "deferred loading its weights (memory=), and they are needed now (a text "
                "not in the feature cache, save, export). Texts in the cache still transform. "
                "Put the folder back, or fit again."
            ) from error
        if now != self.fingerprint:
            raise RuntimeError(
                f"The model folder {self.folder!r} changed after fit (its files hash to "
                f"{now[:12]}, fit saw {self.fingerprint[:12]}); fit deferred loading its "
                "weights (memory=), and vectors of the new weights would be mixed with, and "
                "cached as, the old model's. Fit again to use the new model."
            )
