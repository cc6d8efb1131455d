"""The CUTLASS convolutions (cutlass_conv2d.cu) built for `cw compile --conv-algo cutlass`:
by nvcc for a GPU arch (one object per math), or by g++ as plain host loops for the tests; each
cached under cw's cache directory and linked into every batch size's kernel library
(`link_inputs`)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

from cw.compile.cutlass_conv import SYMBOL
from cw.errors import DeviceError
from cw.tvm_env import cache_dir, find_cuda_path, load_tvm

SOURCE = Path(__file__).with_name("cutlass_conv2d.cu")


def _include_dirs() -> list[str]:
    import tvm_ffi.libinfo as ffi_info

    tvm = load_tvm()
    cutlass = Path(tvm.__file__).parent / "3rdparty" / "cutlass" / "include"
    if not (cutlass / "cutlass" / "cutlass.h").exists():
        raise DeviceError(f"CUTLASS headers not found under {cutlass}",
                          "reinstall apache-tvm (its wheel ships them), or compile with "
                          "--conv-algo direct")
    return [str(cutlass), ffi_info.find_include_path(), ffi_info.find_dlpack_include_path()]


STALE_DAYS = 14  # a cached object of a kind unused this long, once another replaced it, goes


def _cached(kind: str, key: str, suffix: str, build) -> Path:
    """The object `build` writes, cached as SYMBOL-KIND-KEY.SUFFIX (KIND: arch and math; KEY:
    a hash of everything that goes into it). Each use marks it used; a build removes the
    objects of the same kind that nothing used for STALE_DAYS (older sources or toolkits),
    so that the cache does not grow with every cw release, while two cw versions used side by
    side keep theirs."""
    folder = cache_dir() / "cutlass"
    out = folder / f"{SYMBOL}-{kind}-{key}{suffix}"
    if out.exists():
        try:
            os.utime(out)
        except OSError:
            pass  # a read-only cache still serves
        return out
    folder.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    try:
        build(tmp)
        os.replace(tmp, out)  # another process may have built the same; either is whole
    finally:
        tmp.unlink(missing_ok=True)
    _prune(folder, f"{SYMBOL}-{kind}-", suffix, keep=out)
    return out


def _prune(folder: Path, prefix: str, suffix: str, keep: Path) -> None:
    cutoff = time.time() - STALE_DAYS * 86400
    for old in folder.glob(f"{prefix}*{suffix}"):
        try:
            if old != keep and old.name.endswith(suffix) and old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass  # another process pruned it, or it is not ours to remove


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
        first = (errors or done.stderr.splitlines() or ['?'])[0][:300]
        raise DeviceError(f"{what} failed: {first}",
                          "run with CW_DEBUG=1 to keep TVM's messages; check the CUDA toolkit")


def build_object(arch: str, tf32: bool = False) -> Path:
    """The CUTLASS convolutions compiled for `arch` (sm_80 or newer: the kernels use Ampere's
    tensor-core instructions; CompileConfig checks), cached: the 3xTF32 function, or with `tf32`
    the TF32 one (each object holds one, so a bundle links only what it calls)."""
    toolkit = find_cuda_path()
    if toolkit is None:
        raise DeviceError("CUTLASS convolutions (the CUDA default on sm_80+) need nvcc (the "
                          "CUDA 13 toolkit)",
                          "install it or set CUDA_PATH; or compile with --conv-algo direct")
    nvcc = os.path.join(toolkit, "bin", "nvcc")
    includes = _include_dirs()
    number = arch.removeprefix("sm_")
    flags = ["-std=c++17", "-O3", "-DNDEBUG", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
             "-w", f"-gencode=arch=compute_{number},code=sm_{number}"]
    if tf32:
        flags.append("-DCW_CONV_TF32")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), arch, version, *flags, *includes])
                         .encode()).hexdigest()[:16]
    return _cached(f"{arch}-{'tf32' if tf32 else '3xtf32'}", key, ".o", lambda tmp: _run(
        [nvcc, *flags, *[f"-I{d}" for d in includes], "-c", str(SOURCE), "-o", str(tmp)],
        "compiling the CUTLASS convolutions (nvcc)"))


def build_reference_object() -> Path:
    """Both functions as plain host loops (g++, no CUDA; the TF32 one rounds its operands as the
    tensor cores do): for tests of the graph rewrite, the calling convention and TF32's accuracy
    on a CPU. Never part of a bundle."""
    includes = _include_dirs()[1:]
    flags = ["-std=c++17", "-O2", "-fPIC", "-DCW_CONV_REFERENCE"]
    key = hashlib.sha256("\0".join([SOURCE.read_text(), "reference", *flags, *includes])
                         .encode()).hexdigest()[:16]
    return _cached("reference", key, ".ref.o", lambda tmp: _run(
        ["g++", *flags, *[f"-I{d}" for d in includes], "-x", "c++", "-c", str(SOURCE), "-o",
         str(tmp)], "compiling the reference convolution (g++)"))


def link_inputs(obj: Path) -> list[str]:
    """What a kernel library holding the CUTLASS object links, in order: the object, then the
    CUDA runtime by path (TVM puts linker options before the objects, where `-lcudart` would
    resolve nothing), so that the library records it as needed (libcudart.so.13: the one TVM's
    CUDA runtime has loaded by then)."""
    toolkit = find_cuda_path()
    cudart = os.path.join(toolkit or "", "lib64", "libcudart.so")
    if toolkit is None or not os.path.exists(cudart):
        raise DeviceError("CUTLASS convolutions (the CUDA default on sm_80+) need the CUDA 13 "
                          "toolkit's libcudart.so",
                          "install the toolkit or set CUDA_PATH; or compile with --conv-algo "
                          "direct")
    return [str(obj), cudart]
