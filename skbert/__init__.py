"""skbert: BERT-family encoders as first-class scikit-learn estimators."""

from .sentence import BertSentenceTransformer

__version__ = "0.1.0.dev0"

__all__ = ["BertSentenceTransformer", "__version__"]
