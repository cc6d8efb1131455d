"""CPU bundles of real-world ONNX files against onnxruntime on the same input, side by side.

    python bench/edge_speed.py MODEL.onnx=BUNDLE[,BUNDLE2...] [...] [--runs 10] [--rounds 2]

For each ONNX file: onnxruntime (CPU, its default graph optimizations) and each bundle given for
it (`cw compile MODEL.onnx -o BUNDLE --batch-sizes 1`; several: e.g. the same model compiled by
older code), run in turn on one random input at batch 1, round after round; prints the median of
`--runs` runs per round and each bundle's time over onnxruntime's in the same round.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def median_ms(run, runs: int) -> float:
    for _ in range(2):
        run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def main() -> None:
    import onnxruntime as ort

    from cw.engine import LocalModel

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", metavar="MODEL.onnx=BUNDLE[,BUNDLE...]")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # (old exporters' initializer-as-input warnings, hundreds)
    for pair in args.pairs:
        onnx_path, _, bundles = pair.partition("=")
        session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        spec = session.get_inputs()[0]
        models = [(b, LocalModel(b)) for b in bundles.split(",")]
        # the bundle's shape: the file's may leave more than the batch open (--input-shape)
        shape = [1, *models[0][1].manifest.inputs[0].sample_shape]
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        for r in range(1, args.rounds + 1):
            ref = median_ms(lambda: session.run(None, {spec.name: x}), args.runs)
            cells = []
            for name, m in models:
                ms = median_ms(lambda m=m: m.run([x]), args.runs)
                cells.append(f"{name} {ms:.1f} ms (×{ms / ref:.2f})")
            print(f"{onnx_path} round {r}: onnxruntime {ref:.1f} ms; " + "; ".join(cells),
                  flush=True)


if __name__ == "__main__":
    main()
