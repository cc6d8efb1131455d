"""CPU bundles of real-world ONNX files against onnxruntime on the same input, side by side.

    python bench/edge_speed.py MODEL.onnx=BUNDLE[,BUNDLE2...] [...] [--runs 10] [--rounds 2]
                               [--batch 1] [--stat median|min] [--engine-of CHECKOUT]

For each ONNX file: onnxruntime (CPU, its default graph optimizations) and each bundle given for
it (`cw compile MODEL.onnx -o BUNDLE --batch-sizes 1`; several: e.g. the same model compiled by
older code), run in turn on one random input at batch `--batch` (a size the bundles compiled, or
padded up to one), round after round (onnxruntime's session
opened anew each round and closed before cw runs); prints the median (or, with `--stat min`,
the fastest) of `--runs` runs per round and each bundle's time over onnxruntime's in the same
round. With `--engine-of`, each bundle also runs through the `LocalModel` of another checkout's
cw/engine.py (the rest of cw is this one's): what a change to the run path itself costs.
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np


def median_ms(run, runs: int, stat: str = "median") -> float:
    """`run`'s median (or fastest, `stat="min"`) time in ms over `runs` runs, after two."""
    for _ in range(2):
        run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times) if stat == "median" else np.min(times)) * 1e3


def onnxruntime_ms(onnx_path: str, options, feeds: dict, runs: int, stat: str) -> float:
    """onnxruntime's median (or fastest) on `feeds` in a session of its own, closed on
    return."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    return median_ms(lambda: session.run(None, feeds), runs, stat)


def engine_of(checkout: str):
    """The LocalModel class of `checkout`'s cw/engine.py, loaded as a module of its own."""
    import importlib.util
    import sys
    from pathlib import Path

    name = "cw_engine_of_checkout"
    spec = importlib.util.spec_from_file_location(name, Path(checkout) / "cw" / "engine.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.LocalModel


def main() -> None:
    import onnxruntime as ort

    from cw.bundle import synthetic_input
    from cw.engine import LocalModel
    from cw.verify import source_feeds

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", metavar="MODEL.onnx=BUNDLE[,BUNDLE...]")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    # on a noisy machine the fastest run is less moved by its slow spells than the median (on
    # the 2-core build machine a median of 9 moved 30 % between rounds, 2026-11-30)
    ap.add_argument("--stat", choices=("median", "min"), default="median")
    ap.add_argument("--engine-of", metavar="CHECKOUT",
                    help="also run each bundle through this checkout's cw/engine.py")
    args = ap.parse_args()
    other = engine_of(args.engine_of) if args.engine_of else None
    options = ort.SessionOptions()
    options.log_severity_level = 3  # (old exporters' initializer-as-input warnings, hundreds)
    for pair in args.pairs:
        onnx_path, _, bundles = pair.partition("=")
        models = [(b, LocalModel(b)) for b in bundles.split(",")]
        if other is not None:
            models += [(f"{b} [{args.engine_of}'s engine]", other(b)) for b in bundles.split(",")]
        # the bundle's shape: the file's may leave more than the batch open (--input-shape);
        # values valid for it (token ids within the vocabulary)
        manifest = models[0][1].manifest
        rng = np.random.default_rng(0)
        xs = [synthetic_input(spec, args.batch, rng) for spec in manifest.inputs]
        # the file's own layout and its inputs fixed at compile time (--input-value)
        feeds = source_feeds(manifest, xs)
        for r in range(1, args.rounds + 1):
            # a session per round, closed before cw runs: onnxruntime's idle threads spin,
            # and on 2 cores they took the core TVM's pool waits for (mnist-8: 0.16 ms -> 5-7 ms)
            ref = onnxruntime_ms(onnx_path, options, feeds, args.runs, args.stat)
            gc.collect()
            cells = []
            for name, m in models:
                ms = median_ms(lambda m=m: m.run(xs), args.runs, args.stat)
                cells.append(f"{name} {ms:.3f} ms (×{ms / ref:.2f})")
            print(f"{onnx_path} batch {args.batch} round {r} ({args.stat}): onnxruntime "
                  f"{ref:.3f} ms; " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
