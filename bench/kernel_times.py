"""Where a CPU bundle's time goes, kernel by kernel: each call the Relax VM makes, timed through
its instrument hook, summed over runs and sorted.

    python bench/kernel_times.py BUNDLE [--batch 1] [--runs 5] [--top 30]
    python bench/kernel_times.py BEFORE AFTER [...] [--runs 30]

The instrument hook adds a Python call per kernel, so the total is above a plain run's time;
the shares are what this is for (found: PP-OCR's transposed convolutions at 355 of 450 ms,
YOLOX's per-element `expf` calls; docs/benchmarks.md, CPU kernels).

With several bundles (one model compiled by two versions of cw), they are loaded into one
process and run in turn, one run each at a time, and each kernel's time is the least of its
runs: on a machine whose speed drifts by a quarter between minutes, separate processes gave
ratios of noise. Kernels are matched by name.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np


class _Timed:
    """One bundle's VM at one batch size with an instrument hook that times each call."""

    def __init__(self, path: str, batch: int):
        from cw.bundle import synthetic_input
        from cw.engine import LocalModel, aligned_empty

        self.path = path
        model = LocalModel(path)
        rng = np.random.default_rng(0)
        inputs = [synthetic_input(spec, batch, rng) for spec in model.manifest.inputs]
        model.run(inputs)  # loads the batch size's library; checks the inputs
        self.vm = model._vm(model.manifest.kernel_for(batch).batch_size)
        self.args = []
        for x in inputs:  # as LocalModel.run passes them: aligned, aliased by TVM
            host = aligned_empty(x.shape, x.dtype)
            host[...] = x
            self.args.append(model.tvm.runtime.from_dlpack(host))
        self.args += list(model.weights)
        self.totals: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter = collections.Counter()
        self.started = 0.0
        self.vm["main"](*self.args)
        self.vm.set_instrument(self._instrument)

    def _instrument(self, func, name, before, ret, *call_args):
        if before:
            self.started = time.perf_counter()
        else:
            self.totals[name] += time.perf_counter() - self.started
            self.calls[name] += 1
        return 0  # run the call as usual

    def run(self) -> dict[str, float]:
        """One run: seconds per kind of call."""
        self.totals.clear()
        self.vm["main"](*self.args)
        return dict(self.totals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="+", metavar="bundle")
    ap.add_argument("--batch", type=int, default=1, help="a batch size the bundle compiled")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    if len(args.bundles) > 1:
        return _compare(args)
    timed = _Timed(args.bundles[0], args.batch)
    totals: dict[str, float] = collections.defaultdict(float)
    start = time.perf_counter()
    for _ in range(args.runs):
        for name, seconds in timed.run().items():
            totals[name] += seconds
    wall = (time.perf_counter() - start) / args.runs
    whole = sum(totals.values())
    print(f"{timed.path} batch {args.batch}: {wall * 1e3:.2f} ms per run, instrumented")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{seconds / args.runs * 1e3:9.3f} ms {100 * seconds / whole:5.1f} % "
              f"x{timed.calls[name] // args.runs:<4d} {name}")
    print(f"({len(totals)} kinds of call; {whole / args.runs * 1e3:.2f} ms in calls)")


def _compare(args) -> None:
    """The bundles in turn, each kernel's least time over the runs, side by side."""
    timed = [_Timed(path, args.batch) for path in args.bundles]
    least: list[dict[str, float]] = [{} for _ in timed]
    whole = [float("inf")] * len(timed)
    for _ in range(args.runs):
        for i, t in enumerate(timed):
            run = t.run()
            whole[i] = min(whole[i], sum(run.values()))
            for name, seconds in run.items():
                least[i][name] = min(least[i].get(name, float("inf")), seconds)
    first = least[0]
    names = sorted(set().union(*least), key=lambda n: -max(d.get(n, 0.0) for d in least))
    print(f"batch {args.batch}, least of {args.runs} runs each, in turn; ms "
          f"({' | '.join(args.bundles)}), then each / the first")
    for name in names[:args.top]:
        cells = [f"{d[name] * 1e3:8.3f}" if name in d else "       -" for d in least]
        ratios = [f"x{d[name] / first[name]:.2f}" if name in d and name in first else "  -"
                  for d in least[1:]]
        print(f"{' '.join(cells)}  {' '.join(ratios):>6}  {name}")
    print(f"{' '.join(f'{w * 1e3:8.3f}' for w in whole)}  "
          f"{' '.join(f'x{w / whole[0]:.2f}' for w in whole[1:])}  (whole run: least sum of calls)")


if __name__ == "__main__":
    main()
