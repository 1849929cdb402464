"""skbert: BERT-family encoders as first-class scikit-learn estimators."""

from .classifier import BertTextClassifier
from .optim import layerwise_param_groups
from .sentence import BertSentenceTransformer

__version__ = "0.1.0.dev0"

__all__ = [
    "BertSentenceTransformer",
    "BertTextClassifier",
    "layerwise_param_groups",
    "__version__",
]
