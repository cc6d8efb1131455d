"""Checks on a compiled kernel library (a shared object): that CUDA kernels are device binaries,
and that no weights were compiled into it.

Weights belong in the paged weights blob, which workers copy into their GPU page cache; data
compiled into a kernel library would be loaded with the code, outside the page cache and its
accounting. TVM 0.27 keeps constants of a Relax graph in the VM executable, which ends up in the
library's data sections (.rodata, .data); so the size of those sections bounds the largest
constant the library can hold, whatever pass put it there.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from cw.errors import DeviceError, ModelError

FATBIN_MAGIC = b"\x50\xed\x55\xba"
ELF_MAGIC = b"\x7fELF"
MAX_KERNEL_CONSTANT_BYTES = 1 << 20
DATA_SECTIONS = (".rodata", ".data", ".data.rel.ro", ".lrodata", ".ldata")


def device_binary_count(path: str | os.PathLike) -> tuple[int, bool]:
    """(number of embedded CUDA device binaries, whether CUDA C source is embedded instead)."""
    data = Path(path).read_bytes()
    # The library itself is one ELF file; cubins embedded in it are further ELF images.
    return data.count(FATBIN_MAGIC) + max(0, data.count(ELF_MAGIC) - 1), b"__global__" in data


def check_device_binary(path: Path, name: str, kernels: bool = True) -> None:
    """A CUDA library must hold device binaries: CUDA source would need the full compiler at load
    time, which a GPU worker with a runtime-only TVM does not have. `kernels=False`: the graph
    has no kernel to run (an identity, a reduction over no axis), so none is expected, only no
    source."""
    binaries, has_source = device_binary_count(path)
    if has_source or (kernels and binaries == 0):
        raise DeviceError(f"compiling {name} for CUDA produced CUDA source, not device binaries",
                          "TVM's CUDA backend did not load; check the CUDA 13 toolkit (CUDA_PATH)")


def section_sizes(path: str | os.PathLike) -> dict[str, int]:
    """Section name → size of a 64-bit little-endian ELF file (what cw's libraries are)."""
    data = Path(path).read_bytes()
    if data[:4] != ELF_MAGIC or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, offset, size

    _, names_off, _ = header(shstrndx)
    sizes = {}
    for i in range(shnum):
        name_off, _, size = header(i)
        end = data.index(b"\0", names_off + name_off)
        sizes[data[names_off + name_off:end].decode()] = size
    return sizes


def data_section_bytes(path: str | os.PathLike) -> int:
    return sum(size for name, size in section_sizes(path).items() if name in DATA_SECTIONS)


def check_data_sections(path: Path, name: str, batch: int) -> int:
    """Fail when the library's data sections could hold a constant over 1 MiB; returns their
    size. (CPU libraries only: a CUDA library's device code lives in .rodata too.)"""
    nbytes = data_section_bytes(path)
    if nbytes > MAX_KERNEL_CONSTANT_BYTES:
        raise ModelError(f"the batch-{batch} kernel library of {name} holds {nbytes / 2**20:.1f} "
                         "MiB of data: weights were compiled into it instead of the weights blob",
                         "weights computed inside the graph must fold into initializers; "
                         "report the model (cw compile --verbose shows what was folded)")
    return nbytes
