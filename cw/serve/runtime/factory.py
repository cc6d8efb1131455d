"""One runtime per device of a worker, each with its page cache allocated once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cw.serve.runtime.base import Runtime
from cw.serve.runtime.host import HostModel

if TYPE_CHECKING:
    from cw.serve.worker import WorkerConfig


def make_runtimes(config: WorkerConfig, models: list[HostModel]) -> list[Runtime]:
    """One runtime per device, each with its page cache allocated once."""
    from cw.engine import parse_device
    from cw.errors import UsageError

    page_sizes = {m.weights.page_size for m in models}
    if len(page_sizes) != 1:
        raise UsageError(f"bundles use different page sizes {sorted(page_sizes)}",
                         "compile every model of a worker with the same --page-size")
    page_size = page_sizes.pop()
    runtimes = []
    for text in config.devices:
        kind, index = parse_device(text)
        # the cache's size is checked before it is allocated (on a GPU, before cudaMalloc)
        if config.page_cache_bytes is not None:
            cache = config.page_cache_bytes
        elif config.runtime == "simulated":
            cache = int(21.5 * 2**30)  # Clockwork's V100 figure
        elif kind == "cpu":
            cache = 2 * 2**30
        else:
            cache = default_gpu_cache_bytes(index, models, config.exec_graphs)
        _check_fits(cache, page_size, models, text, given=config.page_cache_bytes is not None)
        if config.runtime == "simulated":
            from cw.serve.runtime.simulated import SimulatedRuntime
            runtimes.append(SimulatedRuntime(page_size, cache // page_size, config.noise,
                                             seed=index))
        elif kind == "cpu":
            from cw.serve.runtime.tvm_cpu import TvmCpuRuntime
            runtimes.append(TvmCpuRuntime(page_size, cache // page_size))
        else:
            from cw.serve.runtime.tvm_cuda import TvmCudaRuntime
            runtimes.append(TvmCudaRuntime(index, page_size, cache // page_size,
                                           exec_graphs=config.exec_graphs))
    return runtimes


def _check_fits(cache_bytes: int, page_size: int, models: list[HostModel], device: str,
                given: bool) -> None:
    """A cache that cannot hold the largest model would refuse its every LOAD while serving:
    refused at start instead."""
    from cw.errors import DeviceError, UsageError
    from cw.units import format_bytes

    if not models:
        return
    biggest = max(models, key=lambda m: m.weights.num_pages)
    need = biggest.weights.num_pages
    pages = cache_bytes // page_size
    if pages >= need:
        return
    what = (f"a page cache of {format_bytes(cache_bytes)} on {device} holds {pages} page(s) of "
            f"{format_bytes(page_size)}; model '{biggest.model_id}' needs {need}")
    if given:
        raise UsageError(what, f"give --page-cache {-(-need * page_size // 2**20)}MiB or more")
    raise DeviceError(what, "free memory on the device, or serve smaller models")


def default_gpu_cache_bytes(index: int, models: list[HostModel], exec_graphs: bool = False) -> int:
    """What the GPU has free, less what the kernels will take besides weights: every distinct
    bundle's workspace and IO buffers at every batch size (TVM's pool keeps a block per size), plus
    1 GiB for TVM's modules and CUDA's own needs. With CUDA graphs, each (bundle, batch size)
    also has input buffers of its graphs' own, device output buffers per IO slot, and a
    capture may take a second workspace."""
    from cw.errors import DeviceError
    from cw.serve.runtime import cuda_api

    cuda_api.use_device(index)
    bundles = {id(m.bundle): m.manifest for m in models}.values()
    from cw.serve.runtime.tvm_cuda import IO_SLOTS

    reserve = 2**30 + sum(k.workspace_bytes + IO_SLOTS * (k.input_bytes + k.output_bytes)
                          + (k.workspace_bytes + k.input_bytes + IO_SLOTS * k.output_bytes
                             if exec_graphs else 0)
                          for m in bundles for k in m.kernels)
    cache = cuda_api.free_bytes() - reserve
    if cache <= 0:
        raise DeviceError(f"GPU {index} has too little free memory for the models' kernels "
                          f"({reserve / 2**20:.0f} MiB needed besides weights)",
                          "free the GPU or serve fewer models")
    return cache
