"""How a model is compiled: the one frozen config of `cw compile` (and of `cw tune`, which
compiles what it tunes), validated when made; the CLI's defaults are read from it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from cw.bundle import check_model_name
from cw.compile import paging, targets
from cw.errors import UsageError
from cw.units import MAX_BATCH

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16)
CONV_ALGOS = ("auto", "direct", "winograd2", "winograd4", "cutlass")
CUTLASS_MIN_SM = 80  # its kernels use Ampere's tensor-core instructions
DEFAULT_CONV_ALGO = "auto"  # the CLI's default too: a made config holds the resolved choice
PRECISIONS = ("fp32", "tf32", "fp16")
DEFAULT_PAGE_SIZE = 16 * paging.MIB
LARGE_KERNEL_LIBRARY_BYTES = 8 * paging.MIB  # ResNet-152's kernels are < 1 MiB


@dataclass(frozen=True)
class CompileConfig:
    target: str = "cpu"              # "cpu" | "cuda"
    arch: str | None = None          # CUDA: "sm_90" (default); CPU: an LLVM -mcpu (default: the
                                     # host's x86-64 level, e.g. "x86-64-v3")
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    page_size: int = DEFAULT_PAGE_SIZE
    name: str | None = None
    force: bool = False
    input_shapes: dict[str, list] = field(default_factory=dict)
    input_values: dict[str, list] = field(default_factory=dict)  # inputs fixed at compile time
    tune_dbs: tuple[str, ...] = ()   # `cw tune` databases or CUTLASS plans, before cw's own
    use_committed_records: bool = True
    conv_layout: str = "nchwc"  # CPU: "nchwc" (blocked) or "nchw" (plain); cw schedules both
    precision: str = "fp32"          # "fp32" | "fp16" (convolutions and matmuls, fp32 sums) |
                                     # "tf32" (CUDA: CUTLASS convolutions, one TF32 product)
    conv_split: str = "auto"         # CUDA: "auto" (split-K where a conv leaves SMs idle) | "off"
    conv_algo: str = DEFAULT_CONV_ALGO  # "auto": cutlass where it runs (CUDA, fp32 or tf32,
                                     # sm_80+), else direct | "direct" | "winograd2" |
                                     # "winograd4" (3x3 convs) | "cutlass" (CUDA: CUTLASS
                                     # 3xTF32 implicit GEMMs); resolved when made
    jobs: int = 0                    # batch sizes built at once (0: one per CPU, at most
                                     # MAX_AUTO_JOBS); their lowering stays one at a time

    def __post_init__(self):
        if self.target not in ("cpu", "cuda"):
            raise UsageError(f"unknown target '{self.target}'", "use --target cpu or --target cuda")
        if self.conv_layout not in ("nchwc", "nchw"):
            raise UsageError(f"unknown convolution layout '{self.conv_layout}'",
                             "use --conv-layout nchwc (default) or nchw")
        if self.conv_split not in ("auto", "off"):
            raise UsageError(f"unknown convolution split '{self.conv_split}'",
                             "use --conv-split auto (default) or off")
        # each applies to one target: on the other it would be silently ignored
        if self.target == "cuda" and self.conv_layout != "nchwc":
            raise UsageError(f"--conv-layout {self.conv_layout} applies to CPU bundles; CUDA "
                             "convolutions keep TVM's layout",
                             "drop --conv-layout, or compile with --target cpu")
        if self.target == "cpu" and self.conv_split != "auto":
            raise UsageError(f"--conv-split {self.conv_split} applies to CUDA bundles",
                             "drop --conv-split, or compile with --target cuda")
        if self.conv_algo not in CONV_ALGOS:
            raise UsageError(f"unknown convolution algorithm '{self.conv_algo}'",
                             "use --conv-algo auto (default), direct, winograd2, winograd4 or "
                             "cutlass")
        if self.precision not in PRECISIONS:
            raise UsageError(f"unknown precision '{self.precision}'",
                             "use --precision fp32 (default), tf32 or fp16")
        if self.precision == "tf32":
            # TF32 is the tensor cores' format, and CUTLASS's convolutions are cw's only path to
            # them: --precision tf32 means those, with one TF32 product instead of three
            if self.target != "cuda":
                raise UsageError("--precision tf32 applies to CUDA bundles (TF32 is an NVIDIA "
                                 "tensor-core format)",
                                 "compile with --target cuda, or use --precision fp32 or fp16")
            if self.conv_algo not in ("auto", "direct", "cutlass"):
                raise UsageError(f"--precision tf32 runs convolutions with CUTLASS, not "
                                 f"{self.conv_algo}",
                                 "drop --conv-algo (tf32 implies cutlass), or use --precision "
                                 "fp32")
            object.__setattr__(self, "conv_algo", "cutlass")
        if self.conv_algo == "auto":
            # CUTLASS's 3xTF32 convolutions keep fp32 accuracy and beat cw's own CUDA kernels
            # and cuDNN on the H100/H200 (docs/benchmarks.md); elsewhere cw's own kernels
            arch = re.fullmatch(r"sm_(\d+)[a-z]?", self.resolved_arch or "") \
                if self.target == "cuda" else None
            cutlass = arch is not None and int(arch[1]) >= CUTLASS_MIN_SM \
                and self.precision == "fp32"
            object.__setattr__(self, "conv_algo", "cutlass" if cutlass else "direct")
        if self.conv_algo == "cutlass" and self.target != "cuda":
            raise UsageError("--conv-algo cutlass applies to CUDA bundles (CUTLASS runs on "
                             "NVIDIA tensor cores)",
                             "compile with --target cuda, or drop --conv-algo")
        if self.conv_algo == "cutlass" and self.precision == "fp16":
            raise UsageError("--conv-algo cutlass takes fp32 operands (3xTF32 products: fp32 "
                             "accuracy on tensor cores; or one TF32 product with --precision "
                             "tf32), not fp16",
                             "use --precision fp32 or tf32 with it, or --conv-algo direct")
        if self.conv_algo not in ("direct", "cutlass") and self.precision != "fp32":
            raise UsageError(f"--conv-algo {self.conv_algo} is fp32 only: its transforms "
                             "round too coarsely in fp16",
                             "use --precision fp32 with it, or --conv-algo direct")
        if not self.batch_sizes or min(self.batch_sizes) < 1 or max(self.batch_sizes) > MAX_BATCH:
            raise UsageError(f"batch sizes must be within 1..{MAX_BATCH}",
                             "e.g. --batch-sizes 1,2,4,8,16")
        if self.name is not None:
            check_model_name(self.name, "--name")
        if self.jobs < 0:
            raise UsageError(f"--jobs {self.jobs} must be 0 (one per CPU) or more",
                             "e.g. --jobs 4, or --jobs 1 to build one batch size at a time")
        if self.page_size < paging.MIB:
            raise UsageError("page size must be at least 1MiB", "e.g. --page-size 16MiB")
        if self.target == "cuda" and self.arch is not None and \
                not re.fullmatch(r"sm_[1-9]\d+[a-z]?", self.arch):
            raise UsageError(f"unknown CUDA --arch '{self.arch}'",
                             "write it like sm_90 (H100), sm_80 (A100) or sm_89 (L40S)")
        if self.conv_algo == "cutlass" and \
                int(re.sub(r"\D", "", self.resolved_arch or "sm_90")) < CUTLASS_MIN_SM:
            what = "--precision tf32" if self.precision == "tf32" else "--conv-algo cutlass"
            raise UsageError(f"{what} needs sm_80 or newer, not {self.resolved_arch} "
                             "(its kernels use Ampere's tensor-core instructions)",
                             "use --precision fp32 --conv-algo direct for older GPUs")

    @property
    def resolved_arch(self) -> str | None:
        return targets.resolve_arch(self.target, self.arch)

    def build_jobs(self) -> int:
        """How many batch sizes' kernel libraries are built at once."""
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            (os.cpu_count() or 1)
        return min(self.jobs or min(cpus, MAX_AUTO_JOBS), len(self.batch_sizes))


# `--jobs 0` builds at most this many batch sizes at once: each build holds its lowered module
# and LLVM's or nvcc's working memory (resnet18 on the CPU: +20 MB of peak memory with two at
# once; larger models and machines with many cores were not measured)
MAX_AUTO_JOBS = 4
