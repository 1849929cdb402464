"""The fused int8 steps of ``int8_kernels.c``, compiled for this machine on first use.

The int8 products (:mod:`skbert._inference.cpu.fused_int8`) spend most of their time outside
the int8 product itself when every step around it is a torch operation of its own; the C file
shipped beside this module does each of those steps in one pass. It is compiled the first time
``precision="int8"`` runs, with the machine's C compiler (``$CC``, else ``cc`` or ``gcc``),
``-O3 -march=native``, in well under a second, and loaded with :mod:`ctypes` (whose calls
release the GIL, so the prediction threads run them in parallel). The library is kept in a
cache folder (``$SKBERT_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/skbert/kernels``, else
``~/.cache/skbert/kernels``) under a name hashed from the source, the compiler's version, the
flags and the CPU's model and flags, so a later process loads it without compiling; processes
that compile at once each write a file of their own and rename it into place.

Where no compiler is found or compiling fails, :func:`int8_kernels` returns None and the int8
products run as torch operations (:class:`~skbert._inference.cpu.quantised.Int8`; slower, the
same arithmetic up to rounding): the reason is logged once (logger ``skbert``).
``SKBERT_INT8_KERNELS=torch`` chooses that path without trying; ``=native`` makes a failure to
compile an error instead.
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

__all__ = ["ENV_VARIABLE", "int8_kernels"]

#: Environment variable: "auto" (default: compile, fall back to torch operations on failure),
#: "torch" (never compile) or "native" (compile; failing is an error).
ENV_VARIABLE = "SKBERT_INT8_KERNELS"
SOURCE = Path(__file__).with_name("int8_kernels.c")
#: ``-ffp-contract=off``: no multiply-add is fused but the source's explicit ``fmaf``, so a
#: vectorised loop and its scalar remainder compute an element alike. The finite-math flags
#: let the compiler vectorise the rows' min / max (exact in any order).
FLAGS = (
    "-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-ffinite-math-only",
    "-fno-signed-zeros", "-fPIC", "-shared",
)  # fmt: skip
COMPILE_TIMEOUT = 120
_LOG = logging.getLogger("skbert")
_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {
    "quantise_symmetric": [_P, _I, _I, _I, _P, _P, _P],
    "quantise_asymmetric": [_P, _I, _I, _I, _P, _P, _P],
    "scale_back": [_P, _I, _I, _P, _P, _P, _P, _P, _P, _I, ctypes.c_int, _P, _I],
    "gelu_quantise": [_P, _I, _I, _P, _P, _P, _I, _P, _P, _P, _P, _P],
}


@functools.cache
def int8_kernels():
    """The loaded library (a :class:`ctypes.CDLL` with the functions of ``int8_kernels.c``), or
    None where the int8 products run as torch operations (see the module's description).

    Raises
    ------
    RuntimeError
        With ``SKBERT_INT8_KERNELS=native`` where the library cannot be built or loaded.
    ValueError
        If ``SKBERT_INT8_KERNELS`` names no choice.
    """
    choice = os.environ.get(ENV_VARIABLE, "auto").strip().lower() or "auto"
    if choice not in ("auto", "torch", "native"):
        raise ValueError(
            f"{ENV_VARIABLE}={choice!r} is not a choice; use 'auto', 'native' or 'torch'."
        )
    if choice == "torch":
        return None
    try:
        return _load(_build())
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        if choice == "native":
            raise RuntimeError(f"{ENV_VARIABLE}='native', but {error}") from error
        _LOG.info("skbert: int8 products run as torch operations (slower): %s", error)
        return None


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


def _build() -> Path:
    """The compiled library's path, compiling it where the cache lacks it."""
    compiler = _compiler()
    version = subprocess.run(
        [*compiler.split(), "--version"], capture_output=True, text=True, timeout=30
    ).stdout
    source = SOURCE.read_bytes()
    digest = hashlib.sha256()
    for part in (source, version.encode(), " ".join(FLAGS).encode(), _cpu_identity().encode()):
        digest.update(part)
        digest.update(b"\0")
    folder = cache_folder()
    target = folder / f"int8_kernels-{digest.hexdigest()[:20]}{_suffix()}"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as work:
        built = Path(work) / target.name
        command = [*compiler.split(), *FLAGS, "-o", str(built), str(SOURCE)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(
                f"compiling {SOURCE.name} failed ({' '.join(command)}): "
                f"{(done.stderr or done.stdout).strip()[-500:]}"
            )
        os.replace(built, target)
    return target


def _load(path: Path):
    library = ctypes.CDLL(str(path))
    for name, arguments in _SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes = arguments
        function.restype = None
    return library


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
