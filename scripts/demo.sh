#!/usr/bin/env bash
# Set up (see scripts/setup.sh) and run the demo: GridSearchCV over pooling x layer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} .venv/bin/python examples/demo_grid_search.py
