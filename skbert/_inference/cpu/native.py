"""The C kernels shipped beside this module, compiled for this machine on first use.

Two sources: ``int8_kernels.c``, the steps around the int8 products
(:mod:`skbert._inference.cpu.fused_int8`: quantising rows, scaling the sums back with the bias,
the float channels, GELU or the residual and a layer norm), which as torch operations took most
of the int8 products' time; and ``attention_kernel.c``, attention of the tiled layers' short
blocks (:mod:`skbert._inference.cpu.attention`). Each is compiled the first time it is needed,
with the machine's C compiler (``$CC``, else ``cc`` or ``gcc``), ``-O3 -march=native``, in well
under a second, and loaded with :mod:`ctypes` (whose calls release the GIL, so the prediction
threads run them in parallel). The libraries are kept in a cache folder
(``$SKBERT_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/skbert/kernels``, else
``~/.cache/skbert/kernels``) under names hashed from the source, the compiler's version, the
flags and the CPU's model and flags, so a later process loads them without compiling;
processes that compile at once each write a file of their own and rename it into place.

Where no compiler is found or compiling fails, :func:`int8_kernels` and
:func:`attention_kernel` return None and that work runs as torch operations (slower, the same
arithmetic up to rounding): the reason is logged once (logger ``skbert``). An environment
variable per kernel, ``SKBERT_INT8_KERNELS`` and ``SKBERT_ATTENTION_KERNEL``, chooses: ``auto``
(the default), ``torch`` (the torch operations, without trying) or ``native`` (a failure to
compile is an error).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "ATTENTION",
    "INT8",
    "Kernel",
    "attention_kernel",
    "int8_kernels",
    "library",
    "source_digest",
]


class Kernel(NamedTuple):
    """A C source shipped with the package, how it is compiled and what runs where it is not."""

    #: The C file, beside this module.
    source: Path
    #: The compiler's flags.
    flags: tuple
    #: Per exported function, its arguments' :mod:`ctypes` types, and its result's (or None).
    signatures: dict
    #: The environment variable that chooses: "auto", "torch" or "native".
    variable: str
    #: What runs instead, for the log and the errors.
    instead: str


_P, _I = ctypes.c_void_p, ctypes.c_int64
_SHARED = ("-O3", "-march=native", "-fPIC", "-shared")
#: ``scale_back``'s 21 arguments (int8_kernels.c)
_SCALE_BACK = [
    _P, _I, _I, _P, _P, _P, _P, _P, _P, _I, _I, _P, _P, _I, ctypes.c_int, _P, _I, _P, _P,
    ctypes.c_float, _P,
]  # fmt: skip
#: ``-ffp-contract=off``: no multiply-add is fused but the source's explicit ``fmaf``, so a
#: vectorised loop and its scalar remainder compute an element alike. The finite-math flags
#: let the compiler vectorise the rows' min / max (exact in any order).
INT8 = Kernel(
    Path(__file__).with_name("int8_kernels.c"),
    (*_SHARED, "-ffp-contract=off", "-fno-math-errno", "-ffinite-math-only", "-fno-signed-zeros"),
    {
        "quantise_symmetric": ([_P, _I, _I, _I, _P, _P, _P], None),
        "quantise_asymmetric": ([_P, _I, _I, _I, _P, _P, _P], None),
        "scale_back": (_SCALE_BACK, None),
        "gelu_quantise": ([_P, _I, _I, _P, _P, _P, _I, _P, _P, _P, _P, _P], None),
    },
    "SKBERT_INT8_KERNELS",
    "int8 products run as torch operations (slower)",
)
#: The source's vectors need no element computed apart (every row is padded to whole vectors),
#: so multiply-adds are fused wherever the compiler can (``-ffp-contract=fast``).
ATTENTION = Kernel(
    Path(__file__).with_name("attention_kernel.c"),
    (*_SHARED, "-ffp-contract=fast"),
    {
        "attend": ([_P, _I, _I, _I, _I, ctypes.c_float, _P, _P], ctypes.c_int),
        "attend_scratch": ([_I, _I], ctypes.c_int64),
    },
    "SKBERT_ATTENTION_KERNEL",
    "attention runs PyTorch's kernel (slower on short texts)",
)
COMPILE_TIMEOUT = 120
_LOG = logging.getLogger("skbert")


@functools.cache
def int8_kernels():
    """The library of ``int8_kernels.c`` loaded (a :class:`ctypes.CDLL`), or None where the
    int8 products run as torch operations (see the module's description and :func:`library`)."""
    return library(INT8)


@functools.cache
def attention_kernel():
    """The library of ``attention_kernel.c`` loaded (a :class:`ctypes.CDLL`), or None where
    attention runs PyTorch's kernel (see the module's description and :func:`library`)."""
    return library(ATTENTION)


def library(kernel: Kernel):
    """``kernel`` compiled (where the cache lacks it) and loaded, or None where its variable
    says ``torch`` or (with ``auto``) it cannot be built (the reason is logged).

    Raises
    ------
    RuntimeError
        Where the variable says ``native`` and the library cannot be built or loaded.
    ValueError
        If the variable names no choice.
    """
    choice = os.environ.get(kernel.variable, "auto").strip().lower() or "auto"
    if choice not in ("auto", "torch", "native"):
        raise ValueError(
            f"{kernel.variable}={choice!r} is not a choice; use 'auto', 'native' or 'torch'."
        )
    if choice == "torch":
        return None
    try:
        return _load(_build(kernel), kernel)
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        if choice == "native":
            raise RuntimeError(f"{kernel.variable}='native', but {error}") from error
        _LOG.info("skbert: %s: %s", kernel.instead, error)
        return None


def source_digest(kernel: Kernel) -> str:
    """The first 12 hexadecimal digits of the SHA-256 of ``kernel``'s source: names the
    arithmetic of its results (the feature cache keys vectors by it)."""
    return _digest(kernel.source)


@functools.cache
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def cache_folder() -> Path:
    """Where compiled kernels are kept (see the module's description)."""
    explicit = os.environ.get("SKBERT_KERNEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "skbert" / "kernels"


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name.split()[0]):
            return name
    raise RuntimeError("no C compiler was found ($CC, cc or gcc)")


def _build(kernel: Kernel) -> Path:
    """The compiled library's path, compiling it where the cache lacks it."""
    compiler = _compiler()
    version = subprocess.run(
        [*compiler.split(), "--version"], capture_output=True, text=True, timeout=30
    ).stdout
    source = kernel.source.read_bytes()
    digest = hashlib.sha256()
    for part in (
        source,
        version.encode(),
        " ".join(kernel.flags).encode(),
        _cpu_identity().encode(),
    ):
        digest.update(part)
        digest.update(b"\0")
    folder = cache_folder()
    target = folder / f"{kernel.source.stem}-{digest.hexdigest()[:20]}{_suffix()}"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as work:
        built = Path(work) / target.name
        command = [*compiler.split(), *kernel.flags, "-o", str(built), str(kernel.source)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(
                f"compiling {kernel.source.name} failed ({' '.join(command)}): "
                f"{(done.stderr or done.stdout).strip()[-500:]}"
            )
        os.replace(built, target)
    return target


def _load(path: Path, kernel: Kernel):
    loaded = ctypes.CDLL(str(path))
    for name, (arguments, result) in kernel.signatures.items():
        function = getattr(loaded, name)
        function.argtypes = arguments
        function.restype = result
    return loaded


def _suffix() -> str:
    return {"Darwin": ".dylib", "Windows": ".dll"}.get(platform.system(), ".so")


def _cpu_identity() -> str:
    """The CPU's model and flags (``/proc/cpuinfo``; the platform's description elsewhere):
    ``-march=native`` code is for this CPU only."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            lines = [line for line in info if line.startswith(("model name", "flags", "Features"))]
            return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor() + platform.machine()
