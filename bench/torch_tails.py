"""PyTorch's EXEC tail on the same GPU: p99.99 / p50 of a CUDA graph replay (cuDNN, fp32),
timed one replay at a time with CUDA events, the way `cw profile` times cw's EXEC.

Issue 7 asks cw's EXEC for p99.99/p50 ≤ 1.01. At batch 1 the CUTLASS ResNets missed it by a
tail of 11-13 µs on 0.47-0.98 ms (H200, docs/benchmarks.md): whether that tail is cw's or the
GPU's shows in what PyTorch's own graph does beside it.

    python bench/torch_tails.py --bundles DIR --models resnet18,resnet50 --batch 1 --runs 10000

(DIR holds NAME.onnx, or it is exported there from model_zoo.) Prints one table row per model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_zoo


def tails(samples_ms: list[float]) -> dict:
    s = np.sort(np.asarray(samples_ms))
    at = {q: float(np.quantile(s, q, method="higher")) for q in (0.5, 0.99, 0.9999)}
    return {"runs": len(s), "p50": at[0.5], "p99": at[0.99], "p9999": at[0.9999],
            "max": float(s[-1]), "ratio": at[0.9999] / at[0.5]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundles", required=True, help="directory with (or for) NAME.onnx")
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--max-time", type=float, default=25.0, help="seconds per model, at most")
    args = ap.parse_args()

    import time

    import model_zoo
    import torch
    from torch_onnx import TorchOnnx, capture_cuda_graph

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name(0)}; PyTorch {torch.__version__} CUDA graph "
          f"(cuDNN, fp32), batch {args.batch}, one replay at a time between CUDA events")
    print("| model | batch | runs | p50 ms | p99 ms | p99.99 ms | max ms | p99.99 / p50 |")
    print("|---|---|---|---|---|---|---|---|")
    slowest = []
    for name in args.models.split(","):
        onnx_path = Path(args.bundles) / f"{name}.onnx"
        if not onnx_path.exists():
            model_zoo.export(name, onnx_path)
        model = TorchOnnx(onnx_path, device="cuda")
        x = torch.from_numpy(np.random.default_rng(args.batch).standard_normal(
            (args.batch, *model_zoo.get(name).input_shape)).astype(np.float32)).cuda()
        replay, _ = capture_cuda_graph(model, x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples: list[float] = []
        began: list[float] = []
        until = time.monotonic() + args.max_time
        for i in range(args.runs + 50):
            at = time.monotonic()
            start.record()
            replay()
            end.record()
            end.synchronize()
            if i >= 50:  # warm-up: clocks and caches
                samples.append(start.elapsed_time(end))
                began.append(at)
            if time.monotonic() > until:
                break
        t = tails(samples)
        print(f"| {name} | {args.batch} | {t['runs']} | {t['p50']:.3f} | {t['p99']:.3f} | "
              f"{t['p9999']:.3f} | {t['max']:.3f} | {t['ratio']:.4f} |", flush=True)
        slowest.append((name, slowest_runs(samples, began)))
    # when the tail came (as `cw profile` keeps for cw's EXEC: profile.json's exec_slowest)
    for name, runs in slowest:
        print(f"{name}, slowest replays in ms: " + ", ".join(
            f"{ms:.3f} (run {run + 1:,}, at {at:.2f} s)" for run, ms, at in runs))


def slowest_runs(samples_ms: list[float], began: list[float], kept: int = 8) -> list:
    """The `kept` slowest samples as (run, ms, seconds from the first run), in run order."""
    order = sorted(np.argsort(samples_ms)[-kept:]) if samples_ms else []
    return [(int(i), samples_ms[i], began[i] - began[0]) for i in order]


if __name__ == "__main__":
    main()
