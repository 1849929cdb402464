#!/usr/bin/env bash
# Run the test suite on the oldest versions skbert supports: the lower bounds of
# pyproject.toml's [project] dependencies, installed into their own venv (.venv-oldest).
#
# The pins live here, once; the script first checks that they are exactly pyproject's lower
# bounds (same packages, same versions), so that the two cannot drift apart. The other
# packages (the test extra, tokenizers, scipy, pandas, ...) are whatever pip finds compatible
# with the pins.
#
# PyTorch: PyPI has no CPU-only build of old releases for Linux x86_64; its torch wheel is the
# CUDA build, which imports only with its nvidia-* libraries (about 3 GB more to download, 5 GB
# in the venv; about 2.5 minutes on the first run, less once pip's cache holds the wheels). It
# runs on the CPU like any other. A fast path as in setup.sh: a stamp in the venv holds a hash
# of the pins, pyproject.toml, the extras, the Python version and this checkout's path; a venv
# whose stamp matches is used as it is (FORCE=1 rebuilds it).
#
# Extra arguments go to pytest, e.g. `bash scripts/test-oldest.sh tests/test_backbone.py`;
# TEST_WORKERS pytest-xdist processes as in scripts/test.sh (default 2, 0 for none).
# The tests on the 110 M-parameter all-mpnet-base-v2 (marker real_mpnet) run in the main suite
# only (scripts/test.sh), to keep CI's time: a `-m` among the arguments replaces that choice.
# `--prepare` only creates the venv and installs the pinned torch (the long part: downloading
# and unpacking; no file of the checkout is written), so that .ci/run can do it while the main
# suite runs; a later run installs the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-oldest}
EXTRAS=${EXTRAS:-models,test}
FORCE=${FORCE:-0}

# The oldest supported versions: pyproject.toml's lower bounds, one pin per dependency.
OLDEST=(
    "scikit-learn==1.6.0"
    "torch==2.2.0"
    "transformers==4.46.0"
    "numpy==1.24.0"
    "joblib==1.3.0"
    "tqdm==4.66.0"
    "filelock==3.12.0"
)

# The pins and pyproject's lower bounds must agree (1.6 and 1.6.0 are the same version).
"$PYTHON" - "${OLDEST[@]}" <<'EOF'
import re
import sys

def release(version):
    parts = [int(p) for p in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)

text = open("pyproject.toml", encoding="utf-8").read()
block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
bounds = {}
for name, version in re.findall(r'"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)[^"]*"', block):
    bounds[name.lower()] = version
pins = dict(pin.lower().split("==") for pin in sys.argv[1:])
problems = [
    f"{name}: pyproject says >={bounds.get(name)}, scripts/test-oldest.sh pins =={pins.get(name)}"
    for name in sorted(set(bounds) | set(pins))
    if name not in bounds or name not in pins or release(bounds[name]) != release(pins[name])
]
if problems:
    sys.exit("test-oldest.sh: the pins are not pyproject.toml's lower bounds:\n  "
             + "\n  ".join(problems))
EOF

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PY="$(cd "$VENV/bin" && pwd -P)/python"
constraints="$VENV/oldest-constraints.txt"
printf '%s\n' "${OLDEST[@]}" >"$constraints"

if [ "${1:-}" = "--prepare" ]; then
    start=$SECONDS
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet -c "$constraints" "$(grep '^torch==' "$constraints")"
    echo "test-oldest.sh: $("$PY" -m pip list 2>/dev/null | grep '^torch ') in $VENV," \
        "$((SECONDS - start)) s"
    exit 0
fi
STAMP="$VENV/.skbert-oldest-stamp"
stamp=$(
    {
        echo "stamp-format 1"
        echo "root $ROOT"
        echo "extras $EXTRAS"
        printf '%s\n' "${OLDEST[@]}"
        "$PY" -I -c 'import sys; print("python", sys.version)'
        cat pyproject.toml
    } | sha256sum | cut -d' ' -f1
)
if [ "$FORCE" = 1 ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$stamp" ]; then
    rm -f "$STAMP"
    start=$SECONDS
    "$PY" -m pip install --quiet --upgrade pip
    # The pins as constraints: pip must take exactly these versions, and finds the rest.
    PYTHONWARNINGS="ignore:Editable installation" "$PY" -m pip install --quiet \
        -c "$constraints" "${OLDEST[@]}" -e ".[$EXTRAS]"
    echo "$stamp" >"$STAMP"
    echo "test-oldest.sh: $VENV installed in $((SECONDS - start)) s"
fi
"$PY" -c "import torch, transformers, sklearn, numpy, skbert; print(f'oldest: skbert {skbert.__version__} from {skbert.__path__[0]}: torch {torch.__version__}, transformers {transformers.__version__}, scikit-learn {sklearn.__version__}, numpy {numpy.__version__}')"

export SKBERT_DATA=${SKBERT_DATA:-$(cd .. && pwd)/shared/data}
export HF_HUB_OFFLINE=1
status=0
"$PY" -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-2}" -m "not real_mpnet" "$@" || status=$?
# pytest exits 5 when a selection collects nothing (as scripts/test.sh allows).
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests for this selection"
    exit 0
fi
exit "$status"
