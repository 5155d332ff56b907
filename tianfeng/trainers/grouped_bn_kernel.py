"""The compiled CPU kernel behind per-GPU BatchNorm in channels_last (`csrc/grouped_bn.cpp`).

The eager channels_last path makes eight to ten passes over memory in separate torch calls where
torch's own BatchNorm makes three forward and two backward in one kernel; the kernel makes as
many as torch's. It is built with torch's extension builder (a C++ compiler and ninja), by
`scripts/setup.sh` or else on first use (about a minute), into torch's extension folder
(TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions), once per torch install, compiler and
source, and loaded from there by later processes without asking the build tool again: ninja's
own staleness check reads its log, which two ninja versions (a venv's and the system's) write
differently, so each would rebuild the other's build. Where it cannot be built, `kernel()` says so once and
returns None, and the eager path runs: slower, the same numbers. TIANFENG_GROUPED_BN_KERNEL=0
turns it off."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

import torch

from tianfeng.trainers.quiet_builder import quiet_extension_builder

log = logging.getLogger("tianfeng.engine")
SOURCE = Path(__file__).parent / "csrc" / "grouped_bn.cpp"
_loaded: dict[str, ModuleType | None] = {}


def build_directory() -> Path:
    """One folder per source text (installs of different tianfeng versions do not rebuild each
    other's) and per torch install: the build command names torch's headers and libraries and
    Python's headers by path, so two venvs sharing one folder would each see the other's build as
    stale and rebuild it in turn, about a minute every time."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    install = f"{Path(torch.__file__).resolve().parent}\n{sysconfig.get_paths()['include']}\n{compiler()}"
    digest = hashlib.sha256(SOURCE.read_bytes() + install.encode()).hexdigest()[:12]
    return Path(root) / f"tianfeng_grouped_bn-torch{torch.__version__.replace('+', '-')}-{digest}"


@functools.cache
def compiler() -> str:
    """The C++ compiler torch's builder runs ($CXX, else c++) and its version line: a build
    belongs to the compiler that made it."""
    name = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([name, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return name
    return f"{name} {out.stdout.splitlines()[0] if out.stdout else ''}"


def _import_built(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("tianfeng_grouped_bn", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _source_in(folder: Path) -> Path:
    """The source, copied into the build folder: the build then names the same file wherever
    tianfeng is installed (a checkout, a wheel in another venv), so ninja does not rebuild."""
    copy = folder / SOURCE.name
    text = SOURCE.read_bytes()
    if not copy.exists() or copy.read_bytes() != text:
        partial = folder / f".{SOURCE.name}.{os.getpid()}"
        partial.write_bytes(text)
        os.replace(partial, copy)
    return copy


def kernel() -> ModuleType | None:
    """The built kernel module (`batch_norm`, differentiable), or None where it cannot be built."""
    if "module" in _loaded:
        return _loaded["module"]
    _loaded["module"] = None
    if os.environ.get("TIANFENG_GROUPED_BN_KERNEL", "1") == "0":
        return None
    quiet_extension_builder()
    try:
        folder = build_directory()
        built = folder / "tianfeng_grouped_bn.so"
        if not built.exists():
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / ".build.lock", "w") as lock:  # one process builds; the others wait for it
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not built.exists():
                    _build(folder)
        _loaded["module"] = _import_built(built)
    except Exception as error:  # noqa: BLE001 - any build failure leaves the eager path, said once
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        log.warning("per-GPU BatchNorm: its CPU kernel could not be built (%s: %s); the slower eager path runs",
                    type(error).__name__, first[:200])
    return _loaded["module"]


def _build(folder: Path) -> None:
    from torch.utils.cpp_extension import load

    _ninja_on_path()
    log.warning("per-GPU BatchNorm: building its CPU kernel, about a minute, once: no build yet for torch %s, "
                "%s and this source (in %s)", torch.__version__, compiler(), folder)
    load(name="tianfeng_grouped_bn", sources=[str(_source_in(folder))], build_directory=str(folder),
         extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


def _ninja_on_path() -> None:
    """The builder runs `ninja` from PATH; a venv that is not activated has its own (the ninja
    package's) off PATH."""
    if shutil.which("ninja") is None:
        with contextlib.suppress(ImportError):
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def usable(x: torch.Tensor, weight: torch.Tensor, groups: int, running_mean: torch.Tensor | None = None) -> bool:
    """Whether the kernel takes this batch: a channels_last CPU batch of float32, bfloat16 or
    float16 dealt evenly, float32 parameters and running statistics (the engine's; autocast keeps
    them), and the kernel built. Float64 stays on the eager path, which keeps float64 throughout.
    Under torch.compile the eager path runs too: the kernel is opaque to its tracer, which would
    break the graph at every BatchNorm layer (and warn each time)."""
    return (not torch.compiler.is_compiling()
            and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
            and x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
            and len(x) % groups == 0 and weight.dtype == torch.float32 and weight.device.type == "cpu"
            and (running_mean is None or running_mean.dtype == torch.float32)
            and kernel() is not None)
