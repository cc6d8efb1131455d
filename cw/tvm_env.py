"""Import TVM once, set up for what this machine can do.

On a build machine without a GPU, TVM's CUDA runtime library cannot load (it links the driver,
libcuda.so.1) and TVM then silently emits CUDA *source* that a runtime-only TVM cannot load. We
load a stub driver first (cw/compile/libcuda_stub.c, built with gcc on first use) so that TVM
compiles real device binaries with the CUDA toolkit. On a GPU machine with a runtime-only TVM
(no compiler library) we load the CUDA runtime library ourselves, since TVM skips its autoload
there. Everything else in cw imports TVM through `load_tvm()`, never directly, because this has
to happen before the first `import tvm`.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import subprocess
import sys
from pathlib import Path

_STUB_SOURCE = Path(__file__).parent / "compile" / "libcuda_stub.c"
_tvm = None
_cuda_codegen_problem: str | None = "TVM not loaded yet"


def cache_dir() -> Path:
    root = os.environ.get("CW_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cw")
    return Path(root)


def find_cuda_path() -> str | None:
    """The CUDA toolkit: $CUDA_PATH, else the newest /usr/local/cuda-13.*, else /usr/local/cuda.
    Guessing from `which nvcc` is wrong where nvcc is a wrapper script."""
    candidates = [os.environ.get("CUDA_PATH", "")]
    candidates += sorted(glob.glob("/usr/local/cuda-13*"), reverse=True) + ["/usr/local/cuda"]
    for path in candidates:
        if path and os.path.isfile(os.path.join(path, "bin", "nvcc")):
            return path
    return None


def nvcc_archs(cuda_path: str | None = None) -> list[str] | None:
    """The GPU architectures this CUDA toolkit's nvcc compiles for (sm_75, ...), or None when
    it cannot say."""
    cuda_path = cuda_path or find_cuda_path()
    if cuda_path is None:
        return None
    try:
        listed = subprocess.run([os.path.join(cuda_path, "bin", "nvcc"), "--list-gpu-arch"],
                                capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    archs = [a.replace("compute_", "sm_") for a in listed.split() if a.startswith("compute_")]
    return archs or None


def _find_cudart(cuda_path: str) -> str | None:
    for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
        candidate = os.path.join(cuda_path, sub, "libcudart.so.13")
        if os.path.exists(candidate):
            return candidate
    return None


def _build_stub() -> str:
    source = _STUB_SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:12]
    out = cache_dir() / f"libcuda-stub-{digest}" / "libcuda.so.1"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o",
                        str(tmp), str(_STUB_SOURCE)], check=True, capture_output=True)
        os.replace(tmp, out)
    return str(out)


def _prepare_cuda_codegen() -> str | None:
    """Make TVM's CUDA backend loadable; returns why it cannot be, or None."""
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
        has_driver = True
    except OSError:
        has_driver = False
    cuda_path = find_cuda_path()
    if cuda_path is None:
        return "no CUDA 13 toolkit found (install one or set CUDA_PATH)"
    os.environ["CUDA_PATH"] = cuda_path
    os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    cudart = _find_cudart(cuda_path)
    if cudart is None:
        return f"libcudart.so.13 not found under {cuda_path} (CUDA 13 is needed)"
    try:
        if not has_driver:
            ctypes.CDLL(_build_stub(), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"cannot prepare the CUDA libraries: {e}"
    return None


def core_groups() -> list[list[int]]:
    """The CPUs this process may run on, grouped by physical core (SMT siblings together)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [[i] for i in range(os.cpu_count() or 1)]
    groups: dict[str, list[int]] = {}
    for cpu in cpus:
        try:
            siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/"
                            "thread_siblings_list").read_text().strip()
        except OSError:
            siblings = str(cpu)
        groups.setdefault(siblings, []).append(cpu)
    return list(groups.values()) or [[0]]


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on (SMT siblings count once)."""
    return len(core_groups())


def split_cores(count: int, groups: list[list[int]] | None = None) -> list[list[int]]:
    """CPUs for `count` CPU workers on this machine (`groups`: core_groups()): whole physical
    cores, contiguous, as even as possible; with more workers than cores they share cores
    round-robin."""
    groups = core_groups() if groups is None else groups
    if count >= len(groups):
        return [groups[i % len(groups)] for i in range(count)]
    out, start = [], 0
    for i in range(count):
        n = len(groups) // count + (1 if i < len(groups) % count else 0)
        out.append([cpu for g in groups[start:start + n] for cpu in g])
        start += n
    return out


def cpu_threads() -> int:
    """Threads TVM's CPU kernels use in this process: TVM_NUM_THREADS (or OMP_NUM_THREADS) when
    set, else one per physical core this process may run on."""
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return physical_cores()


def _configure_cpu_threads() -> None:
    # Left alone, TVM halves std::thread::hardware_concurrency() on x86 to skip hyper-threads;
    # on a VM without SMT (this build machine: 2 cores) that leaves half the cores idle and
    # made every CPU kernel ~1.7x slower. Its thread pool reads the variable when first used.
    if not any(os.environ.get(v) for v in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["TVM_NUM_THREADS"] = str(physical_cores())


def pin_to_cpus(cpus: list[int]) -> int:
    """Run this process, and the kernel threads TVM will start, on `cpus` only, one kernel
    thread per physical core among them (a thread count inherited from the parent process is
    replaced). Must come before TVM is loaded. Returns the number of threads."""
    if _tvm is not None:
        raise RuntimeError("pin_to_cpus must be called before load_tvm()")
    os.sched_setaffinity(0, cpus)
    os.environ.pop("OMP_NUM_THREADS", None)
    os.environ["TVM_NUM_THREADS"] = str(physical_cores())
    return physical_cores()


def load_tvm():
    """The `tvm` module, imported once with CUDA code generation enabled where possible."""
    global _tvm, _cuda_codegen_problem
    if _tvm is not None:
        return _tvm
    _configure_cpu_threads()
    problem = None
    imported_before = "tvm" in sys.modules
    if not imported_before:
        problem = _prepare_cuda_codegen()
    import tvm

    if getattr(tvm, "_RUNTIME_ONLY", False):
        lib = Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"
        try:
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            problem = f"TVM's CUDA runtime did not load: {e}"
        import tvm.runtime.vm  # noqa: F401  (not imported by a runtime-only tvm)
        problem = problem or "this TVM is runtime-only (no compiler)"
    elif problem is None and tvm.get_global_func("ffi.Module.create.cuda",
                                                 allow_missing=True) is None:
        problem = "TVM's CUDA backend did not load" + (
            " (tvm was imported before cw.tvm_env.load_tvm(), which prepares it: call that "
            "first)" if imported_before else "")
    _cuda_codegen_problem = problem
    _tvm = tvm
    return tvm


def cuda_codegen_problem() -> str | None:
    """Why CUDA kernels cannot be compiled in this process, or None when they can."""
    load_tvm()
    return _cuda_codegen_problem


def runtime_only() -> bool:
    return bool(getattr(load_tvm(), "_RUNTIME_ONLY", False))
