"""The device and numeric precision a fit or a prediction runs in, and its autocast context.

:func:`resolve_device` turns the estimators' ``device`` parameter into a :class:`torch.device`
(a ``torchrun`` rank's own GPU for a bare ``"cuda"``), :func:`resolve_precision` their
``precision`` parameter into an autocast dtype, and :func:`autocast` enters it. Used by the
estimators (:mod:`skbert._estimator.base`), :mod:`skbert.pretraining` and the training loop
(:mod:`skbert._training.loop`).
"""

from __future__ import annotations

import contextlib
import re

import torch

from .launch import local_device

__all__ = ["BF16_TRAINING_MIN_FLOPS", "autocast", "resolve_device", "resolve_precision"]

_DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check_device_name(device) -> None:
    """Refuse a ``device`` that is none of the names skbert takes (whether or not the machine
    has it: that is :func:`resolve_device`'s question)."""
    if not isinstance(device, str) or not _DEVICE_PATTERN.match(device):
        raise ValueError(
            f"device={device!r} is not allowed; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'."
        )


def resolve_device(device: str) -> torch.device:
    """Turn the ``device`` parameter into a :class:`torch.device` that exists here.

    ``"auto"`` picks CUDA, then Apple's MPS, then the CPU.
    """
    check_device_name(device)
    if device == "auto":
        if torch.cuda.is_available():
            return local_device(torch.device("cuda"))
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
        resolved = local_device(resolved)  # a torchrun rank's own GPU for a bare "cuda"
    if resolved.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise RuntimeError(
                f"device={device!r} but MPS is not available on this machine; "
                "use set_params(device='auto') or device='cpu'."
            )
    return resolved


#: Matrix-product FLOPs per token of BERT-base (12 layers, 768 wide, 3,072 inner): on CUDA,
#: ``precision="auto"`` trains models at least this costly in bf16 and smaller ones in fp32.
BF16_TRAINING_MIN_FLOPS = 2 * 12 * (4 * 768 * 768 + 2 * 768 * 3072)


def resolve_precision(precision: str, device: torch.device, *, training_flops=None):
    """Return the autocast dtype for ``precision`` on ``device``, or None for float32.

    ``"auto"`` means fp32 on the CPU and MPS (where reduced precision is opt-in: ask for
    ``"bf16"``). On CUDA it means bf16 (fp16 on GPUs without bf16 hardware, before Ampere),
    except for training a model cheaper than BERT-base (``training_flops``, the matrix-product
    FLOPs per token, below :data:`BF16_TRAINING_MIN_FLOPS`): such a model is too small to keep
    the GPU's matrix units busy, and autocast's casts cost more than they save (fine-tuning
    all-MiniLM-L6-v2 on an NVIDIA H200 was 1.7x slower in bf16 than in fp32), so it trains in
    fp32.

    ``"int8"`` is an inference precision: it trains in fp32 (None here), and prediction runs
    int8 products on the CPU where it can (:mod:`skbert._inference.int8`).
    """
    if precision in ("fp32", "int8"):
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float16
    if precision == "auto":
        if device.type != "cuda":
            return None
        if training_flops is not None and training_flops < BF16_TRAINING_MIN_FLOPS:
            return None
        return torch.bfloat16 if _bf16_in_hardware(device) else torch.float16
    raise ValueError(
        f"precision={precision!r} is not allowed; use 'auto', 'fp32', 'bf16', 'fp16' or 'int8'."
    )


def _bf16_in_hardware(device: torch.device) -> bool:
    """Whether the GPU ``device`` computes bf16 in hardware: compute capability 8.0 (Ampere) and
    later, and ROCm's GPUs. ``torch.cuda.is_bf16_supported()`` also counts emulation, which
    says yes on a T4 or V100, where bf16 is slower than fp16."""
    if torch.version.hip:
        return True
    return torch.cuda.get_device_capability(device) >= (8, 0)


def autocast(device: torch.device, dtype):
    """An autocast context for ``dtype`` on ``device``; a no-op for float32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def full_precision(device: torch.device):
    """A block inside :func:`autocast` that computes in float32 (a loss whose products of
    float32 vectors autocast would run in bfloat16 or float16)."""
    try:
        return torch.autocast(device_type=device.type, enabled=False)
    except RuntimeError:  # a device autocast does not know (MPS on old torch): none is on
        return contextlib.nullcontext()
