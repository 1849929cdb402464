#!/usr/bin/env bash
# Set up (see scripts/setup.sh), install the `docs` extra and build the HTML documentation into
# docs/_build/html, with warnings treated as errors. Offline: the packaged model, no intersphinx.
#
# The build executes the quick gallery example (examples/demo_grid_search.py, a few seconds on
# 2 idle CPU cores; docs/conf.py lists the executed ones) and the getting-started notebook, and
# renders the other examples without running them (their docstrings hold a measured run's
# output). Extra arguments go to sphinx-build, e.g. `bash scripts/docs.sh -D plot_gallery=0`
# renders the gallery without executing it.
set -euo pipefail
cd "$(dirname "$0")/.."
# setup.sh with the docs extra too: it installs only when pyproject.toml or the extras changed
EXTRAS=${EXTRAS:-models,test,dask,onnx,docs} bash scripts/setup.sh
VENV=${VENV:-.venv}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
# -E: read every page again, so that no warning hides in a page cached from a previous build
"$VENV/bin/python" -m sphinx -W --keep-going -E -b html docs docs/_build/html "$@"
echo "documentation: docs/_build/html/index.html"
