"""``fit_transform`` that reads ``X`` once, so that a generator of texts works as a list."""

from __future__ import annotations

from collections.abc import Iterator

from sklearn.base import TransformerMixin

__all__ = ["OneReadTransformerMixin"]


class OneReadTransformerMixin(TransformerMixin):
    """scikit-learn's ``TransformerMixin`` whose ``fit_transform`` reads an iterator ``X``
    (a generator, a file's lines) once: ``fit`` and ``transform`` both read ``X``, and the
    second read of a spent generator found it empty (``X is empty``), as a Pipeline's first
    step does on ``Pipeline.fit(generator, y)``."""

    def fit_transform(self, X, y=None, **fit_params):
        """Fit to ``X`` (and ``y``), then return its vectors, reading ``X`` once.

        As ``fit(X, y, **fit_params).transform(X)``, but a generator ``X`` is read once.

        Parameters
        ----------
        X : iterable of str, or array-like of sentence pairs
            What :meth:`fit` takes; a generator is read once, into a list.
        y : array-like of shape (n_samples,), default=None
            What :meth:`fit` takes.
        **fit_params : dict
            Passed on to :meth:`fit`.

        Returns
        -------
        ndarray of shape (n_samples, n_features_out)
            The vectors of ``X``, as :meth:`transform` gives them.
        """
        if isinstance(X, Iterator):
            X = list(X)
        return super().fit_transform(X, y, **fit_params)
