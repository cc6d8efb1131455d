"""What a bundle is compiled for: the TVM target, the key its tuning records are filed under, and
whether this host can run CPU kernels built for a given -mcpu.

Plain "llvm" (no -mcpu) generates SSE2 code and leaves AVX2/FMA unused, so CPU bundles default to
the best x86-64 level the compiling host has: x86-64-v4 (AVX-512) or x86-64-v3 (AVX2, FMA,
BMI2). A library built for either dies with SIGILL on an older CPU, so the loader checks the
host before loading one; `--arch x86-64-v3` builds bundles that AVX2-only machines can run.
"""

from __future__ import annotations

import platform
from functools import lru_cache

from cw.errors import DeviceError
from cw.tvm_env import load_tvm

DEFAULT_CUDA_ARCH = "sm_90"
GENERIC_CPU = "x86-64"

# x86-64 micro-architecture levels -> the /proc/cpuinfo flags each needs (psABI names differ
# from cpuinfo's in places: LZCNT is 'abm', SSE3 is 'pni').
X86_LEVEL_FLAGS = {
    "x86-64": set(),
    "x86-64-v2": {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"},
    "x86-64-v3": {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3",
                  "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
    "x86-64-v4": {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3",
                  "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave",
                  "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}


@lru_cache(maxsize=1)
def host_cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def default_cpu_arch(flags: frozenset[str] | None = None) -> str | None:
    """The best x86-64 level this host (or a CPU with these /proc/cpuinfo `flags`) runs; None
    (plain llvm) off x86-64, where LLVM's default for the host architecture is used. AVX-512
    counts: cw's convolutions then take 16-channel blocks, and resnet18, resnet50 and
    inception_v3 ran ×1.6-1.7 faster than with AVX2's 8 on a 2-core Xeon (docs/benchmarks.md)."""
    if flags is None:
        if platform.machine() not in ("x86_64", "AMD64"):
            return None
        flags = host_cpu_flags()
    for level in ("x86-64-v4", "x86-64-v3", "x86-64-v2"):
        if X86_LEVEL_FLAGS[level] <= flags:
            return level
    return GENERIC_CPU


def check_host_runs(arch: str | None, where: str) -> None:
    """Refuse CPU kernels this host cannot execute (they would die with SIGILL, not an error)."""
    if arch not in X86_LEVEL_FLAGS or platform.machine() not in ("x86_64", "AMD64"):
        return  # "native", a named CPU or another architecture: the loader cannot tell; trust it
    missing = X86_LEVEL_FLAGS[arch] - host_cpu_flags()
    if missing and host_cpu_flags():
        raise DeviceError(f"bundle {where} was compiled for {arch}, which this CPU lacks "
                          f"({', '.join(sorted(missing))})",
                          f"recompile it here with --arch {default_cpu_arch()}")


def check_gpu_runs(bundle_arch: str | None, device_arch: str, where: str) -> None:
    """A cubin runs on GPUs of its own major architecture at an equal or newer minor version."""
    def parse(arch: str) -> tuple[int, int]:
        digits = arch.removeprefix("sm_").rstrip("af")
        return int(digits[:-1]), int(digits[-1])

    if not bundle_arch:
        return
    (bmaj, bmin), (dmaj, dmin) = parse(bundle_arch), parse(device_arch)
    if bmaj != dmaj or bmin > dmin:
        raise DeviceError(f"bundle {where} was compiled for {bundle_arch}; this GPU is "
                          f"{device_arch}", f"recompile it with --target cuda --arch {device_arch}")


def check_cuda_arch(arch: str) -> None:
    """An architecture this CUDA toolkit's nvcc cannot compile for, refused before the
    compile (nvcc said so only after the model was imported and lowered, minutes in)."""
    import re

    from cw.errors import UsageError
    from cw.tvm_env import nvcc_archs

    match = re.fullmatch(r"sm_(\d+)[a-z]?", arch)  # (CompileConfig checked the form)
    known = nvcc_archs()
    if match and known and f"sm_{match.group(1)}" not in known:
        raise UsageError(f"--arch {arch}: this CUDA toolkit's nvcc cannot compile for it",
                         f"choose one of {', '.join(known)}")


def resolve_arch(kind: str, arch: str | None) -> str | None:
    if kind == "cuda":
        return arch or DEFAULT_CUDA_ARCH
    return arch or default_cpu_arch()


def tvm_target(kind: str, arch: str | None, num_cores: int | None = None):
    """`num_cores` only matters to MetaSchedule (parallel extents); compiled code ignores it."""
    tvm = load_tvm()
    if kind == "cuda":
        return tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")
    spec: dict = {"kind": "llvm"}
    if arch:
        spec["mcpu"] = arch
    if num_cores:
        spec["num-cores"] = num_cores
    return tvm.target.Target(spec)


# What MetaSchedule's GPU rules and its VerifyGPUCode check read from a CUDA target (plain
# {"kind": "cuda", "arch": ...} lacks them, and tuning then fails before its first candidate):
# static shared memory per block is 48 KiB on every arch cw targets, threads 1,024, registers
# 64 Ki. Kernels compiled without them are the same: dlight reads none of these.
CUDA_TUNING_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
                      "registers_per_block": 65536, "thread_warp_size": 32}


def tuning_target(kind: str, arch: str | None, num_cores: int | None = None):
    """The target MetaSchedule searches and builds candidates for: `tvm_target` with the
    hardware limits its rules need."""
    tvm = load_tvm()
    if kind == "cuda":
        return tvm.target.Target({"kind": "cuda", "arch": arch, **CUDA_TUNING_LIMITS},
                                 host="llvm")
    return tvm_target(kind, arch, num_cores)


def target_key(kind: str, arch: str | None) -> str:
    """Directory name tuning records are filed under: records only transfer between identical
    code generation targets (MetaSchedule's database matches workloads, not targets)."""
    return f"{kind}-{arch or 'generic'}"
