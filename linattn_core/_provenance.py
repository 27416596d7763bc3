"""Where a number comes from: the device a run uses, the hardware and software around it, the commit.

One helper for everything that measures or trains (the timing cells, the benchmark, the language
model's training and the recall runs): :func:`pick_device` chooses CUDA, then Apple MPS, then the CPU
(or what the reader asks for, by argument or the ``LINATTN_DEVICE`` environment variable);
:func:`environment` records the hardware and software a number was measured on; :func:`git_commit`
the code. torch is imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._backend import check_positive_int

__all__ = ["ENV_DEVICE", "GIB", "cpu_name", "describe_device", "device_name", "dtype_name", "environment",
           "git_commit", "num_threads", "pick_device", "torch_device", "torch_dtype"]

#: Environment variable that overrides the automatic device choice (``cpu``, ``cuda``, ``cuda:1``, ``mps``).
ENV_DEVICE = "LINATTN_DEVICE"
#: Bytes in a GiB.
GIB = 2**30


def _mps_available(torch: Any) -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def pick_device(prefer: Any = None) -> Any:
    """The device to time on: CUDA if available, then Apple MPS, then the CPU.

    Parameters
    ----------
    prefer : str or torch.device, optional
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or ``"auto"``. Without it, the environment variable
        ``LINATTN_DEVICE`` is read; without that (or with ``"auto"``) the first available of CUDA, MPS, CPU.

    Returns
    -------
    torch.device

    Raises
    ------
    ValueError
        If the requested device is not a device name or is not available on this machine (an explicit
        request never falls back silently).

    Examples
    --------
    >>> dev = pick_device("cpu")
    >>> dev.type
    'cpu'
    """
    import torch

    if prefer is not None:
        choice, source = prefer, "prefer"
    else:
        choice, source = os.environ.get(ENV_DEVICE, "").strip() or None, ENV_DEVICE
    if choice is None or (isinstance(choice, str) and choice.strip().lower() == "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available(torch):
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(choice.strip().lower() if isinstance(choice, str) else choice)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{source}={choice!r} is not a device name; use 'cpu', 'cuda', 'cuda:N', 'mps' "
                         "or 'auto'") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{source}={choice!r} asks for CUDA, but torch.cuda.is_available() is False "
                             f"(torch {torch.__version__}); use 'cpu' or 'auto'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{source}={choice!r}: this machine has {torch.cuda.device_count()} CUDA "
                             "device(s)")
    elif dev.type == "mps":
        if not _mps_available(torch):
            raise ValueError(f"{source}={choice!r} asks for Apple MPS, but torch.backends.mps.is_available() "
                             "is False; use 'cpu' or 'auto'")
    elif dev.type != "cpu":
        raise ValueError(f"{source}={choice!r}: only 'cpu', 'cuda' and 'mps' devices are supported")
    return dev


def cpu_name() -> str:
    """The processor's model name (from ``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        import subprocess

        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                 text=True, timeout=5, check=False).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def torch_device(device: Any) -> Any:
    """``device`` as a ``torch.device``: passed through, or chosen by :func:`pick_device` from a name."""
    import torch

    return device if isinstance(device, torch.device) else pick_device(device)


def device_name(device: Any) -> str:
    """The hardware behind ``device``: the GPU's name for CUDA, the chip for MPS/CPU."""
    import torch

    dev = torch_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "mps":
        return f"Apple GPU (MPS) on {cpu_name()}"
    return cpu_name()


def describe_device(device: Any = None) -> str:
    """One line naming the device, e.g. ``'cpu: AMD EPYC (2 threads)'`` or ``'cuda:0: NVIDIA H200'``."""
    import torch

    dev = torch_device(device)
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory
        return f"cuda:{index}: {torch.cuda.get_device_name(index)} ({total / GIB:.0f} GiB)"
    if dev.type == "mps":
        return f"mps: {device_name(dev)}"
    n = torch.get_num_threads()
    return f"cpu: {cpu_name()} ({n} thread{'' if n == 1 else 's'})"


def environment(device: Any = None, dtype: Any = None) -> dict[str, Any]:
    """Hardware and software metadata for a measurement: the record of *where* a number came from."""
    import torch

    dev = torch_device(device)
    meta: dict[str, Any] = {
        "device": str(dev),
        "device_name": device_name(dev),
        "device_description": describe_device(dev),
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "dtype": None if dtype is None else dtype_name(dtype),
        # other processes share the machine: their load shows in the numbers, so it is recorded too
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        # whether torch's idle OpenMP workers spin (unset: libgomp spins a while) or sleep (PASSIVE)
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }
    if dev.type == "cuda":
        meta["cuda"] = torch.version.cuda
    return meta


def dtype_name(dtype: Any) -> str:
    """``"float32"`` for ``torch.float32`` or ``"float32"``: how records name a dtype."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(dtype: Any) -> Any:
    """The torch floating dtype named by ``dtype``, or a ValueError naming it."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = dtype_name(dtype)
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"dtype={dtype!r} is not a torch floating dtype (e.g. 'float32', 'float16')")
    return value


@contextlib.contextmanager
def num_threads(threads: int | None) -> Iterator[None]:
    """Run a block with ``torch.set_num_threads(threads)``, restoring the previous number afterwards.

    ``None`` leaves the setting alone. One thread gives steadier CPU timings on a machine shared with other
    programs (threads that wait for each other turn every delay of one into a delay of all).
    """
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        check_positive_int(threads, "threads")
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def git_commit() -> str | None:
    """The commit of the checkout this package runs from (None outside a git checkout)."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
