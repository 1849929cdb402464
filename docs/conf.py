"""Sphinx configuration for the skbert documentation.

Build with ``bash scripts/docs.sh`` (or ``sphinx-build -W --keep-going docs docs/_build/html``).
The build is offline: no intersphinx, and the only gallery example executed is the quick one
listed in ``EXECUTED_EXAMPLES``; the others are rendered without running.
"""

from __future__ import annotations

import logging
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

import sphinx_gallery  # noqa: E402
from packaging.version import Version  # noqa: E402

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
# Long signatures (BertSentenceTransformer has 28 parameters, the first default a hub id) are
# written one parameter per line instead of one line that runs off the page.
maximum_signature_line_length = 88
# "On this page" of a class page lists `fit()`, not `BertSentenceTransformer.fit()`: the long
# qualified names did not fit in the secondary sidebar.
toc_object_entries_show_parents = "hide"

# numpydoc validation of every docstring that the API reference renders: a failed check is a
# warning, so an error under `-W`. All checks apply except
#   ES01 (extended summary): short helpers (`get_data_home`, scorers) need no second paragraph;
#   SA01 (See Also): the API is small and the user guide links the pieces together;
#   EX01 (Examples): the estimators show usage in the gallery, user guide and notebook, which
#        are run by the test suite, instead of doctests that this offline build cannot run.
numpydoc_validation_checks = {"all", "ES01", "SA01", "EX01"}
# RT02 (a single return value should not be named) does not apply to ``self``: methods that
# return the estimator document it as ``self : <class>``, the scikit-learn convention, where the
# name says that the same object comes back (for chaining).
numpydoc_validation_overrides = {"RT02": [r"Returns\n\s*-+\n\s*self : \w+"]}

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

# myst-parser and myst-nb log their whole configuration (MdParserConfig(...), NbParserConfig(...))
# at INFO level on every build, and no setting turns that off (myst-parser 5.2:
# sphinx_ext/main.py, create_myst_config; myst-nb 1.4: sphinx_ext.py, create_mystnb_config).
# A logging filter drops those two records and nothing else.


class _DropMystConfigDump(logging.Filter):
    def filter(self, record):
        dump = re.search(r"myst(-nb)? v%s:", str(record.msg))
        return not (record.levelno == logging.INFO and dump)


for _logger in ("sphinx.myst_parser.sphinx_ext.main", "sphinx.myst_nb.sphinx_ext"):
    logging.getLogger(_logger).addFilter(_DropMystConfigDump())

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
    "remove_config_comments": True,
    "min_reported_time": 1,
    "show_memory": False,
    "capture_repr": ("_repr_html_", "__repr__"),
    "download_all_examples": False,
}
# Code in the examples links to skbert's API pages. sphinx-gallery 0.22 resolves those links from
# the documentation being built and deprecates `reference_url` (ignored, with a message at every
# build); older releases still need `{"skbert": None}` to embed the links.
if Version(sphinx_gallery.__version__) < Version("0.22"):
    sphinx_gallery_conf["reference_url"] = {"skbert": None}

# -- HTML ----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skbert {release}"
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
}
# Pages without sub-pages have nothing to list in the left sidebar: drop it, which also gives
# their code blocks and tables the width.
html_sidebars = {
    "index": [],
    "install": [],
    "getting_started": [],
    "user_guide": [],
    "notebooks/*": [],
}
# Only the style sheet: docs/_static also holds the charts and gallery thumbnails, which the
# pages reference through Sphinx and sphinx-gallery (copied to _images), and their script.
html_static_path = ["_static/skbert.css"]
# Wrapping of long signatures, code blocks and "On this page" entries (docs/_static/skbert.css).
html_css_files = ["skbert.css"]


# -- scikit-learn's inherited docstrings -----------------------------------------------------
# The estimators inherit methods from scikit-learn (get_params, set_output, score, ...) whose
# docstrings cross-reference scikit-learn's own documentation: :ref:`User Guide <...>`,
# :term:`...` and its gallery (:ref:`sphx_glr_auto_examples_..._plot_x.py`). Those targets
# exist only in scikit-learn's docs, which this offline build cannot resolve (no intersphinx),
# so in those docstrings, and only there, the roles are rewritten: a gallery reference becomes
# a link to that example on scikit-learn.org, "user guide" becomes "scikit-learn user guide",
# any other reference its plain text. A broken reference in skbert's own docstrings still fails
# the build.
_SKLEARN_ROLE = re.compile(r":(ref|term):`\s*([^`<]*?)\s*(?:<([^`>]*)>)?\s*`", re.DOTALL)
_SKLEARN_EXAMPLE = re.compile(r"sphx_glr_auto_examples_(?:(\w+?)_)?(plot_\w+)\.py")


def _sklearn_reference_text(match):
    role, title, target = match.groups()
    title = " ".join(title.split())  # a role may span lines
    label = target or title
    if label.startswith("sphx_glr_"):
        example = _SKLEARN_EXAMPLE.fullmatch(label)
        if example is None:
            return "a scikit-learn example"
        folder, name = example.groups()
        path = f"{folder}/{name}" if folder else name
        text = title if target else f"{name}.py"
        url = f"https://scikit-learn.org/stable/auto_examples/{path}.html"
        return f"`scikit-learn's example {text} <{url}>`__"
    if role == "ref" and title.lower() == "user guide":
        return f"scikit-learn {title}"
    return title


def _unlink_sklearn_references(app, what, name, obj, options, lines):
    module = getattr(obj, "__module__", None) or ""
    if module == "sklearn" or module.startswith("sklearn."):
        text = _SKLEARN_ROLE.sub(_sklearn_reference_text, "\n".join(lines))
        lines[:] = text.split("\n")


# The same inherited methods are scikit-learn's to document: numpydoc validation skips every
# public method of skbert's classes that is defined in scikit-learn (found here from the classes
# themselves, so that a method skbert overrides is validated again).
def _sklearn_methods():
    for class_name in skbert.__all__:
        cls = getattr(skbert, class_name)
        if not isinstance(cls, type):
            continue
        for attribute in dir(cls):
            module = getattr(getattr(cls, attribute, None), "__module__", None) or ""
            if not attribute.startswith("_") and module.split(".")[0] == "sklearn":
                yield f"skbert.{class_name}.{attribute}"


numpydoc_validation_exclude = {re.escape(name) + "$" for name in _sklearn_methods()}


def setup(app):
    app.connect("autodoc-process-docstring", _unlink_sklearn_references, priority=400)
