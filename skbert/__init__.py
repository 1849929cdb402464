"""skbert: BERT-family encoders as first-class scikit-learn estimators.

Imports sit at the top of each module, except the heavy or optional ones, which are imported
on first use so that ``import skbert`` stays quick: transformers (and huggingface_hub), scipy,
the data loaders (:mod:`skbert.datasets`) and the packaged model.
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
    "layerwise_param_groups",
    "load",
    "TrainingDivergedError",
    "__version__",
]
