"""skbert: BERT-family encoders as first-class scikit-learn estimators.

Imports sit at the top of each module, except the heavy or optional ones, which are imported
on first use so that ``import skbert`` stays quick: transformers (and huggingface_hub), the
data loaders (:mod:`skbert.datasets`) and the packaged model. :func:`export_onnx` is
looked up on first use (from :mod:`skbert.onnx`), so that onnx and onnxruntime, an optional
extra, are never imported by ``import skbert``.
"""

from ._core.version import __version__
from ._estimator.persistence.folder import load
from .classifier import BertTextClassifier
from .exceptions import TrainingDivergedError
from .optim import layerwise_param_groups
from .regressor import BertTextRegressor
from .sentence import BertSentenceTransformer

__all__ = [
    "BertSentenceTransformer",
    "BertTextClassifier",
    "BertTextRegressor",
    "export_onnx",
    "layerwise_param_groups",
    "load",
    "TrainingDivergedError",
    "__version__",
]


def __getattr__(name):
    # export_onnx on first use: its module imports the ONNX exporter's packages when it runs
    if name == "export_onnx":
        from .onnx import export_onnx

        return export_onnx
    raise AttributeError(f"module 'skbert' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})  # export_onnx too, imported on first use
