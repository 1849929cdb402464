"""skbert's version: ``skbert.__version__``, and the version a save records (``skbert.json``).

A foundation module, so that any layer can name the version without importing the package
root (keep it equal to ``version`` in ``pyproject.toml``).
"""

__version__ = "0.1.0.dev0"
