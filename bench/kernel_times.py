"""Where a CPU bundle's time goes, kernel by kernel: each call the Relax VM makes, timed through
its instrument hook, summed over runs and sorted.

    python bench/kernel_times.py BUNDLE [--batch 1] [--runs 5] [--top 30]

The instrument hook adds a Python call per kernel, so the total is above a plain run's time;
the shares are what this is for (found: PP-OCR's transposed convolutions at 355 of 450 ms,
YOLOX's per-element `expf` calls; docs/benchmarks.md, CPU kernels).
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np


def main() -> None:
    from cw.bundle import synthetic_input
    from cw.engine import LocalModel, aligned_empty

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--batch", type=int, default=1, help="a batch size the bundle compiled")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    model = LocalModel(args.bundle)
    rng = np.random.default_rng(0)
    inputs = [synthetic_input(spec, args.batch, rng) for spec in model.manifest.inputs]
    model.run(inputs)  # loads the batch size's library; checks the inputs
    vm = model._vm(model.manifest.kernel_for(args.batch).batch_size)
    tvm = model.tvm
    args_in = []
    for x in inputs:  # as LocalModel.run passes them: aligned, aliased by TVM
        host = aligned_empty(x.shape, x.dtype)
        host[...] = x
        args_in.append(tvm.runtime.from_dlpack(host))
    totals: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter = collections.Counter()
    started = [0.0]

    def instrument(func, name, before, ret, *call_args):
        if before:
            started[0] = time.perf_counter()
        else:
            totals[name] += time.perf_counter() - started[0]
            calls[name] += 1
        return 0  # run the call as usual

    vm["main"](*args_in, *model.weights)
    vm.set_instrument(instrument)
    start = time.perf_counter()
    for _ in range(args.runs):
        vm["main"](*args_in, *model.weights)
    wall = (time.perf_counter() - start) / args.runs
    whole = sum(totals.values())
    print(f"{args.bundle} batch {args.batch}: {wall * 1e3:.2f} ms per run, instrumented")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{seconds / args.runs * 1e3:9.3f} ms {100 * seconds / whole:5.1f} % "
              f"x{calls[name] // args.runs:<4d} {name}")
    print(f"({len(totals)} kinds of call; {whole / args.runs * 1e3:.2f} ms in calls)")


if __name__ == "__main__":
    main()
