"""Sphinx configuration for the skbert documentation.

Build with ``bash scripts/docs.sh`` (or ``sphinx-build -W --keep-going docs docs/_build/html``).
The build is offline: no intersphinx (scikit-learn, transformers, numpy, torch and Python names
link through ``extlinks`` instead, below), the only gallery example executed is the quick one
listed in ``EXECUTED_EXAMPLES`` (the others show the output of a measured run, recorded in their
docstrings), and the getting-started notebook is executed (about 20 s).
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
    "sphinx.ext.extlinks",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_nb",  # Markdown (MyST) pages and the notebook
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.ipynb"]
default_role = "literal"  # `x` in rst means ``x``, as in the Markdown pages
# Straight quotes: docutils' "smart quotes" turned the defaults of the API pages into
# default=”auto”, which does not paste as Python.
smartquotes = False

# -- Links to other projects' documentation ------------------------------------------------
# intersphinx needs each project's objects.inv at build time, and this build is offline (and
# scikit-learn's, transformers', numpy's, PyTorch's and Python's sites cannot be reached from
# where it runs, so no inventory could be stored either). Their few names that the guide pages
# cite link through these roles instead, to the page of each project's stable documentation:
# {sklearn}`pipeline.Pipeline` is sklearn.pipeline.Pipeline's page, titled with what is written.
extlinks = {
    "sklearn": ("https://scikit-learn.org/stable/modules/generated/sklearn.%s.html", "%s"),
    "sklearn-guide": ("https://scikit-learn.org/stable/%s", None),
    "transformers": ("https://huggingface.co/docs/transformers/main/en/%s", None),
    "numpy": ("https://numpy.org/doc/stable/reference/generated/numpy.%s.html", "%s"),
    "torch": ("https://docs.pytorch.org/docs/stable/%s", None),
    "python": ("https://docs.python.org/3/library/%s", None),
    "joblib": ("https://joblib.readthedocs.io/en/stable/generated/joblib.%s.html", "%s"),
    "dask": ("https://docs.dask.org/en/stable/%s", None),
}

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
# The getting-started notebook is stored without outputs (tests/test_notebook.py checks that,
# and runs it) and executed by the build, so that its page shows real outputs: the estimator's
# HTML diagram, the vectors, the grid-search table (about 20 s with the packaged model). A cell
# that fails fails the build. It lives in examples/notebooks/; Sphinx reads only files under
# docs/, so it is copied to docs/notebooks/ (ignored by git) at each build, and it runs in a
# temporary folder, so that its cache and outputs stay out of the checkout.
nb_execution_mode = "auto"  # run notebooks stored without outputs: this one
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_in_temp = True
# The notebook's kernel is a separate process: it imports this checkout's skbert too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
)
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
# Most examples fine-tune or encode thousands of texts: minutes to over an hour each on 2 CPU
# cores. Only these are executed during the build; the others are rendered as code, their
# docstrings holding the output of a measured run ("Measured here"), which the user guide's
# tables quote (tests/test_docs.py checks that they agree).
EXECUTED_EXAMPLES = ["demo_grid_search.py"]
# The gallery's order: the quick demo first, then by file name (docs/gallery_order.py).
sys.path.insert(0, str(DOCS))

sphinx_gallery_conf = {
    "examples_dirs": str(REPO / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": "/(" + "|".join(re.escape(name) for name in EXECUTED_EXAMPLES) + ")$",
    "ignore_pattern": r"__init__\.py|/notebooks/",
    "within_subsection_order": "gallery_order.ExampleOrder",
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
    # The header holds one row at 1400 px: the first pages, then "More".
    "header_links_before_dropdown": 5,
    # An example's page is code and its output: the whole width for them, no "On this page".
    # (Pages named one by one: a page that two wildcard patterns match is a warning.)
    "secondary_sidebar_items": {
        "**": ["page-toc", "edit-this-page", "sourcelink"],
        **{
            f"auto_examples/{example.stem}": []
            for example in sorted((REPO / "examples").glob("*.py"))
        },
    },
}
# Pages without sub-pages have nothing to list in the left sidebar: drop it, which also gives
# their code blocks and tables the width.
html_sidebars = {
    "index": [],
    "install": [],
    "getting_started": [],
    "user_guide": [],
    "scaling": [],
    "benchmarks": [],
    "architecture": [],
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
# The module constants (skbert.pooling.TOKEN_POOLINGS, skbert.onnx.MODEL_FILE, ...) are
# documented by a one-line ``#:`` comment, which is no numpydoc docstring.
numpydoc_validation_exclude.add(r"\.[A-Z][A-Z0-9_]+$")
# A pooling module's forward inherits its docstring from the interface it implements
# (skbert.pooling._TokenPooling or _ChunkCombiner), which autodoc shows and numpydoc, reading
# the method's own __doc__, would call missing.
numpydoc_validation_exclude.add(r"^skbert\.pooling\.\w+\.forward$")


def setup(app):
    app.connect("autodoc-process-docstring", _unlink_sklearn_references, priority=400)
