"""Devices, numeric precision, and what a run tells the user (progress bars and messages)."""

from __future__ import annotations

import contextlib
import re
import sys

import torch

__all__ = ["resolve_device", "resolve_precision", "autocast", "progress", "report"]

_DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def resolve_device(device: str) -> torch.device:
    """Turn the ``device`` parameter into a :class:`torch.device` that exists here.

    ``"auto"`` picks CUDA, then Apple's MPS, then the CPU.
    """
    if not isinstance(device, str) or not _DEVICE_PATTERN.match(device):
        raise ValueError(
            f"device={device!r} is not allowed; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'."
        )
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"device={device!r} but CUDA is not available on this machine; "
                "use set_params(device='auto') or device='cpu'."
            )
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"device={device!r} but this machine has {torch.cuda.device_count()} CUDA "
                "device(s)."
            )
    if resolved.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise RuntimeError(
                f"device={device!r} but MPS is not available on this machine; "
                "use set_params(device='auto') or device='cpu'."
            )
    return resolved


def resolve_precision(precision: str, device: torch.device):
    """Return the autocast dtype for ``precision`` on ``device``, or None for float32.

    ``"auto"`` means bf16 on a CUDA device that supports it, else fp16 on CUDA, and fp32 on the
    CPU and MPS (where reduced precision is opt-in: ask for ``"bf16"``).
    """
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float16
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return None
    raise ValueError(
        f"precision={precision!r} is not allowed; use 'auto', 'fp32', 'bf16' or 'fp16'."
    )


def autocast(device: torch.device, dtype):
    """An autocast context for ``dtype`` on ``device``; a no-op for float32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def progress(iterable, *, desc: str, unit: str, verbose, total=None):
    """``iterable`` behind a tqdm progress bar on stderr when ``verbose``, else as it is.

    ``tqdm.auto`` gives a widget in Jupyter (with the ``notebook`` extra) and a text bar
    elsewhere; it is imported on first use.
    """
    if not verbose:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, unit=unit, total=total, file=sys.stderr)


def report(message: str) -> None:
    """Tell the user ``message``: on stderr, the stream of the progress bars, without
    breaking a bar that is being drawn (torch imports tqdm anyway, so this costs nothing)."""
    from tqdm import tqdm

    tqdm.write(message, file=sys.stderr)
