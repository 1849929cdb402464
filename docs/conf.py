"""Sphinx configuration for the skbert documentation.

Build with ``bash scripts/docs.sh`` (or ``sphinx-build -W --keep-going docs docs/_build/html``).
The build is offline: no intersphinx, and the only gallery example executed is the quick one
listed in ``EXECUTED_EXAMPLES``; the others are rendered without running.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent

# The executed example loads the packaged model: never reach the network from a build.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Document (and run the gallery against) the skbert of this checkout, whatever is installed.
sys.path.insert(0, str(REPO))

import skbert  # noqa: E402

project = "skbert"
author = "skbert developers"
copyright = "skbert developers"
version = release = skbert.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_nb",  # Markdown (MyST) pages and the notebook, never executed here
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.ipynb"]
default_role = "literal"  # `x` in rst means ``x``, as in the Markdown pages

# -- API reference -------------------------------------------------------------------------
autosummary_generate = True
autodoc_typehints = "none"  # the numpydoc docstrings give the types
numpydoc_show_class_members = False  # the class template lists the methods
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False

# -- Markdown (the user guide) and the notebook --------------------------------------------
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
# The getting-started notebook is stored without outputs and shown as it is: the build does not
# run it (tests/test_notebook.py does). It lives in examples/notebooks/; Sphinx reads only files
# under docs/, so it is copied to docs/notebooks/ (ignored by git) at each build.
nb_execution_mode = "off"
NOTEBOOKS = DOCS / "notebooks"
NOTEBOOKS.mkdir(exist_ok=True)
for _notebook in sorted((REPO / "examples" / "notebooks").glob("*.ipynb")):
    _copy = NOTEBOOKS / _notebook.name
    if not _copy.exists() or _copy.read_bytes() != _notebook.read_bytes():
        shutil.copy2(_notebook, _copy)

# -- Examples gallery ----------------------------------------------------------------------
# Most examples fine-tune or encode thousands of texts: minutes to a quarter of an hour each on
# a laptop CPU. Only these are executed during the build; the rest are rendered as code, and
# their measured results are quoted in the user guide.
EXECUTED_EXAMPLES = ["demo_grid_search.py"]

sphinx_gallery_conf = {
    "examples_dirs": str(REPO / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": "/(" + "|".join(re.escape(name) for name in EXECUTED_EXAMPLES) + ")$",
    "ignore_pattern": r"__init__\.py|/notebooks/",
    "within_subsection_order": "FileNameSortKey",
    "doc_module": ("skbert",),
    "backreferences_dir": "generated/backreferences",
    "reference_url": {"skbert": None},
    "remove_config_comments": True,
    "min_reported_time": 1,
    "show_memory": False,
    "capture_repr": ("_repr_html_", "__repr__"),
    "download_all_examples": False,
}

# -- HTML ----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skbert {release}"
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
}
html_sidebars = {"index": [], "install": []}


# -- scikit-learn's inherited docstrings -----------------------------------------------------
# The estimators inherit methods from scikit-learn (get_params, set_output, score, ...) whose
# docstrings cross-reference scikit-learn's own documentation (:ref:`User Guide <...>`,
# :term:`...`). Those targets exist only in scikit-learn's docs, which this offline build
# cannot link to (no intersphinx), so the roles are rendered as plain text there, and only
# there: a broken reference in skbert's own docstrings still fails the build.
_SKLEARN_ROLE = re.compile(r":(?:ref|term):`([^`<]*?)\s*(?:<[^`>]*>)?`")


def _unlink_sklearn_references(app, what, name, obj, options, lines):
    module = getattr(obj, "__module__", None) or ""
    if module == "sklearn" or module.startswith("sklearn."):
        lines[:] = [_SKLEARN_ROLE.sub(lambda m: m.group(1), line) for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _unlink_sklearn_references, priority=400)
